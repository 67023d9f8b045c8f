"""Importing what renderers share: memory handles, tensor views and fences.

One module per handle kind (``host_memory``, ``host_fence``); ``capabilities`` answers which
kinds this build and machine can import before anyone tries.
"""

from fenceline.interop.capabilities import FENCE_TYPES, MEMORY_TYPES, capabilities
from fenceline.interop.datatypes import DATATYPES, Datatype, datatype
from fenceline.interop.host_fence import FenceImport, import_fence
from fenceline.interop.host_memory import MemoryImport, TensorBinding, import_memory

__all__ = [
    "DATATYPES",
    "FENCE_TYPES",
    "MEMORY_TYPES",
    "Datatype",
    "FenceImport",
    "MemoryImport",
    "TensorBinding",
    "capabilities",
    "datatype",
    "import_fence",
    "import_memory",
]
