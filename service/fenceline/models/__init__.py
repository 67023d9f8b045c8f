"""Models that ship with fenceline, built with the onnx helper at first use."""

from fenceline.models.builtin import BUILTIN, add_model, build_repository, image_filter_model

__all__ = ["BUILTIN", "add_model", "build_repository", "image_filter_model"]
