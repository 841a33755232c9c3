"""Builds the nightshift package; the gRPC stubs are generated from ../proto at build time.

`pip install ./python` (or `pip wheel ./python`) runs build_py below: grpc_tools.protoc
writes nightshift/v1/{spec,jobs,cluster,admin}_pb2.py and *_pb2_grpc.py, and mypy-protobuf
their type stubs (*.pyi), into the build folder, next to the package's own modules. The
stubs live inside the package as `nightshift.v1`, which is the import path protoc writes
for nightshift/v1/*.proto. NIGHTSHIFT_PROTO_DIR names another proto folder.
"""
import glob
import os
import shutil
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


def proto_dir() -> str:
    """The folder that holds nightshift/v1/*.proto."""
    for candidate in (os.environ.get("NIGHTSHIFT_PROTO_DIR", ""), os.path.join(HERE, "..", "proto"),
                      os.path.join(HERE, "proto")):
        if candidate and glob.glob(os.path.join(candidate, "nightshift", "v1", "*.proto")):
            return os.path.abspath(candidate)
    sys.exit("nightshift: nightshift/v1/*.proto not found beside python/ (../proto) nor in NIGHTSHIFT_PROTO_DIR: "
             "build the package from a Nightshift source tree")


def plugin(name: str) -> str:
    """The path of a protoc plugin installed with the build's Python (mypy-protobuf's)."""
    for candidate in (os.path.join(os.path.dirname(sys.executable), name), shutil.which(name) or ""):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    sys.exit(f"nightshift: {name} not found: install mypy-protobuf (pyproject.toml's build requirements)")


def generate_stubs(out_dir: str) -> None:
    """Writes the stubs of every nightshift/v1/*.proto under out_dir/nightshift/v1."""
    from grpc_tools import protoc  # a build requirement (pyproject.toml)
    import grpc_tools

    src = proto_dir()
    protos = sorted(os.path.relpath(p, src) for p in glob.glob(os.path.join(src, "nightshift", "v1", "*.proto")))
    well_known = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    args = ["grpc_tools.protoc", f"--proto_path={src}", f"--proto_path={well_known}",
            f"--plugin=protoc-gen-mypy={plugin('protoc-gen-mypy')}",
            f"--plugin=protoc-gen-mypy_grpc={plugin('protoc-gen-mypy_grpc')}",
            f"--python_out={out_dir}", f"--grpc_python_out={out_dir}", f"--mypy_out={out_dir}",
            f"--mypy_grpc_out={out_dir}"] + protos
    if protoc.main(args) != 0:
        sys.exit(f"nightshift: protoc failed on {', '.join(protos)}")
    with open(os.path.join(out_dir, "nightshift", "v1", "__init__.py"), "w") as f:
        f.write('"""Messages and service stubs generated from proto/nightshift/v1 at build time."""\n')


class BuildPyWithStubs(build_py):
    """build_py, then the gRPC stubs into the build folder."""

    def run(self) -> None:
        super().run()
        generate_stubs(self.build_lib)


setup(cmdclass={"build_py": BuildPyWithStubs})
