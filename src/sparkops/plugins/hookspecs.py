"""The plugin surface: one hook. A plugin is a module (or object) named by an entry point in group
`sparkops`; the built-in numpy/torch/triton/cupy plugins use the same group as any outside package.

    # my_plugin/__init__.py
    from sparkops.plugins import hookimpl, tolerance

    @hookimpl
    def register_implementations(register):
        register(op="swiglu", name="my_swiglu", backend="torch", devices=("cpu", "cuda"),
                 fn="my_plugin.swiglu:swiglu", claim=tolerance())
"""

import pluggy

PROJECT = "sparkops"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def register_implementations(register):
    """Call `register(...)` once per implementation this plugin provides.

    register(op, name, backend, devices, fn, claim, *, unavailable=None, sources=(), doc="", policy=None)
      op          a named op (`sparkops ops` lists them)
      name        the implementation's name, unique within the op (what `sparkops swap op=NAME` takes)
      backend     "numpy", "torch", "triton", "cupy", or your own
      devices     device classes it runs on natively: ("cpu",), ("cuda",) or both
      fn          the callable, or "module:attr" imported only when it is selected and available
      claim       `tolerance(...)` against the reference or `bit_identical(to=...)`
      unavailable None, or why it cannot run on this machine (no GPU, backend not installed)
      sources     extra files (kernel sources) whose bytes belong in the implementation's hash
      policy      where the implementation hands some calls to other code (a one-token kernel passing a
                  prefill chunk to a GEMM): a function of the op's arguments, or "module:attr", returning
                  None where its own kernels take the call, else what runs it and why ("torch: 64 tokens").
                  Those calls are counted and shown (bench, diagnose, generate): a hidden slow path is a bug
    """
