"""The plugin surface: `hookimpl`, the claims, and the catalog of everything plugins registered."""

from .hookspecs import hookimpl
from .implementation import Claim, Implementation, bit_identical, tolerance
from .manager import Catalog, PluginInfo, load_catalog

__all__ = ["Catalog", "Claim", "Implementation", "PluginInfo", "bit_identical", "hookimpl", "load_catalog",
           "tolerance"]
