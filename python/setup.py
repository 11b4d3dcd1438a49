"""pip install ./python: builds the transmuter package's extension against the library.

The library is looked for, in order: TRANSMUTER_LIB (a libtransmuter.a) with
TRANSMUTER_INCLUDE (the folder of transmuter.h); the repository's own build (../build,
after `make`); an installed one (`make install`: pkg-config transmuter). It is linked in
statically, so the installed package needs only the system libraries the library uses.
With Debian's setuptools and no PyPI: python3 -m pip install --no-build-isolation ./python
"""
import os
import shlex
import subprocess

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SYSTEM_LIBS = ["pcre2-8", "utf8proc", "curl", "sndfile", "jpeg", "png", "tiff", "webp", "openjp2", "m"]


def library():
    lib, inc = os.environ.get("TRANSMUTER_LIB"), os.environ.get("TRANSMUTER_INCLUDE")
    if lib and inc:
        return lib, inc
    built = os.path.join(ROOT, os.environ.get("BUILD", "build"), "libtransmuter.a")
    if os.path.exists(built):
        return built, os.path.join(ROOT, "include")
    try:
        flags = subprocess.run(["pkg-config", "--variable=libdir", "transmuter"], capture_output=True,
                               text=True, check=True).stdout.strip()
        incs = subprocess.run(["pkg-config", "--variable=includedir", "transmuter"], capture_output=True,
                              text=True, check=True).stdout.strip()
        return os.path.join(flags, "libtransmuter.a"), incs
    except (OSError, subprocess.CalledProcessError):
        raise SystemExit("transmuter: no library found: run `make` in the repository, or set "
                         "TRANSMUTER_LIB and TRANSMUTER_INCLUDE")


lib, inc = library()
setup(
    name="transmuter",
    version="0.1.0",
    description="Transmuter (ONNX runtime for Hugging Face exports) from Python",
    packages=["transmuter"],
    python_requires=">=3.8",
    install_requires=["numpy"],
    ext_modules=[Extension(
        "transmuter._transmuter", ["transmuter/_transmuter.c"], include_dirs=[inc],
        extra_compile_args=["-std=c11", "-fvisibility=hidden"] + shlex.split(os.environ.get("CFLAGS_EXTRA", "")),
        extra_objects=[lib], extra_link_args=["-Wl,--exclude-libs,ALL", "-pthread"],
        libraries=SYSTEM_LIBS)],
)
