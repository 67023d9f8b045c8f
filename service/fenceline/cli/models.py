"""``fenceline models list | write DIR``: the builtin models, for people who want their own
repository to start from."""

from __future__ import annotations

import argparse

import onnx

from fenceline.models.builtin import BUILTIN, write_models


def _describe(name: str) -> str:
    graph = onnx.load_model_from_string(BUILTIN[name]()).graph

    def tensors(values: list[onnx.ValueInfoProto]) -> str:
        out = []
        for v in values:
            t = v.type.tensor_type
            dims = [str(d.dim_value) if d.HasField("dim_value") else d.dim_param for d in t.shape.dim]
            dtype = onnx.TensorProto.DataType.Name(t.elem_type)
            out.append(f"{v.name} {dtype}[{','.join(dims)}]")
        return ", ".join(out)

    return f"{name:<18} {tensors(list(graph.input))} -> {tensors(list(graph.output))}"


def models_from_args(args: argparse.Namespace) -> int:
    if args.models_command == "list":
        for name in BUILTIN:
            print(_describe(name))
        return 0
    paths = write_models(args.dir, args.names or None)
    print(f"wrote {len(paths)} model(s) under {args.dir}; serve them with "
          f"`fenceline serve --model-repository {args.dir}`")
    return 0
