"""pytest setup for the Python tests: torch.compile's on-disk caches in a directory of this run.

A warm cache from an earlier process can hold a compiled backward that calls a Kernel's custom op
before this process has made it (docs/python.md, *Autograd*, open); the tests check redfuse, not
the machine's cache, so each run starts with an empty one.
"""
import os
import tempfile

os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="redfuse-tests-inductor-"))
