"""Triton compatibility: KServe v2 inference and Triton's system and CUDA shared-memory regions.

``regions`` is the one namespace and registration flow, ``system_shm`` and ``cuda_shm`` the two
kinds of region, ``inference`` the request path that binds them in place. The HTTP routes are
in fenceline.api (a thin transport over this package)."""
