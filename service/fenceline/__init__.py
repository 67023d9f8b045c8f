"""fenceline: a local inference service for renderers.

Renderers share frame buffers and timeline fences; the service imports them without copies into
ONNX Runtime IOBindings, waits for the input fence, runs the model in place and signals the
output fence.
"""

__version__ = "0.1.0"
