"""GGUF I/O: block formats (`quants`), and the file reader and writer."""
