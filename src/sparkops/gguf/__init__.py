"""GGUF I/O for kimi-linear models.

- `quants`: the block formats (dequantize, quantize, random blocks) in NumPy;
- `names`: the kimi-linear contract as data (metadata keys, tensor names, shapes, weight fields);
- `metadata`: ModelConfig <-> GGUF key/values;
- `mix`: quant mixes, file size and decode bytes per token, computed without allocating;
- `reader`: `load_gguf(path) -> ModelWeights` (memory-mapped, validated);
- `writer`: `write_gguf(...)` (streaming, atomic).
"""
