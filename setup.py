"""Builds the Python package simil (python/simil) from this repository.

    pip install .            # from the repository root

The build runs CMake on the repository to make the shared libsimil and the
simil command, copies both into the package next to the extension
simil._core, and links the extension against libsimil with rpath $ORIGIN, so
the installed package needs nothing outside itself but numpy (and the
libraries libsimil links: OpenBLAS, libgomp, zlib, HDF5).  The command is
installed as `simil` (and runs as `python -m simil`).

Environment:
  SIMIL_CUDA=AUTO|ON|OFF      the CMake option; AUTO (default) builds the CUDA
                              backend when nvcc is found
  SIMIL_CUDA_ARCHITECTURES=L  the GPUs to compile for (CMAKE_CUDA_ARCHITECTURES);
                              default "80-real;90": every 8.x GPU (A100, A10,
                              L4, L40, RTX 30/40) and sm_90 (H100, H200), with
                              PTX for newer ones.  One, such as 90, builds in
                              about half the time; "native" targets the GPUs
                              of the building machine
  SIMIL_CMAKE_BUILD_DIR=DIR   build libsimil in DIR instead of a private tree;
                              if DIR is already configured (such as the build/
                              of scripts/test.sh) it is only built, target
                              simil, with its own configuration (which must not
                              use sanitizers: Python would not load them)
  SIMIL_CMAKE_ARGS="..."      more arguments for the CMake configure step
"""
import os
import re
import shlex
import shutil

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


def library_version():
    """MAJOR.MINOR.PATCH from include/simil/status.h, the one place it is kept."""
    with open(os.path.join(ROOT, "include", "simil", "status.h")) as f:
        text = f.read()
    parts = [re.search(rf"#define SIMIL_VERSION_{p} (\d+)", text).group(1)
             for p in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(parts)


# What the package ships from the CMake tree: the shared library and the tool.
CMAKE_TARGETS = ["simil_shared", "simil_cli"]


class BuildExtWithLibsimil(build_ext):
    """build_ext that first builds libsimil with CMake and ships it in the package."""

    def run(self):
        import numpy  # a build requirement: its headers

        libdir = self.build_libsimil()
        for ext in self.extensions:
            ext.include_dirs += [os.path.join(ROOT, "include"), numpy.get_include()]
            ext.library_dirs.append(libdir)
            # Relink whenever the library changes.
            ext.depends.append(os.path.realpath(os.path.join(libdir, "libsimil.so")))
        super().run()
        for ext in self.extensions:
            dest = os.path.dirname(self.get_ext_fullpath(ext.name))
            self.copy_libsimil(libdir, dest)
            self.copy_tool(libdir, dest)

    def build_libsimil(self):
        """Configure (where needed) and build the CMake target simil; returns its folder."""
        build_dir = os.environ.get("SIMIL_CMAKE_BUILD_DIR")
        own_tree = not build_dir
        if own_tree:
            build_dir = os.path.join(self.build_temp, "cmake")
        build_dir = os.path.abspath(build_dir)
        configured = os.path.exists(os.path.join(build_dir, "CMakeCache.txt"))
        if own_tree or not configured:
            args = ["cmake", "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
                    "-DSIMIL_TESTS=OFF", "-DSIMIL_CUDA=" + os.environ.get("SIMIL_CUDA", "AUTO")]
            if os.environ.get("SIMIL_CUDA_ARCHITECTURES"):
                args.append("-DCMAKE_CUDA_ARCHITECTURES=" + os.environ["SIMIL_CUDA_ARCHITECTURES"])
            if not configured and shutil.which("ninja"):
                args += ["-G", "Ninja"]
            args += shlex.split(os.environ.get("SIMIL_CMAKE_ARGS", ""))
            self.spawn(args)
        self.spawn(["cmake", "--build", build_dir, "--target", *CMAKE_TARGETS,
                    "-j", str(os.cpu_count() or 1)])
        return build_dir

    def copy_tool(self, bindir, dest):
        """The simil command (statically linked against libsimil) into dest/bin."""
        tool = os.path.join(bindir, "simil")
        if not os.path.isfile(tool):
            raise RuntimeError(f"CMake built no simil command in {bindir}")
        os.makedirs(os.path.join(dest, "bin"), exist_ok=True)
        target = os.path.join(dest, "bin", "simil")
        shutil.copyfile(tool, target)
        os.chmod(target, 0o755)

    def copy_libsimil(self, libdir, dest):
        """Copy the library file the extension loads into dest.

        The extension records libsimil's SONAME (libsimil.so.0).  CMake makes
        libsimil.so a link to the SONAME, which links to the real file; the
        SONAME file alone is copied, as a plain file, since wheels hold no
        symbolic links and three copies of the library would be wasted.
        """
        link = os.path.join(libdir, "libsimil.so")
        if not os.path.exists(link):
            raise RuntimeError(f"CMake built no libsimil.so in {libdir}")
        name = os.path.basename(os.readlink(link)) if os.path.islink(link) else "libsimil.so"
        os.makedirs(dest, exist_ok=True)
        target = os.path.join(dest, name)
        if os.path.lexists(target):
            os.remove(target)
        shutil.copyfile(os.path.realpath(link), target)
        os.chmod(target, 0o755)


core = Extension(
    "simil._core",
    sources=["python/simil/_core.c", "python/simil/_core_index.c"],
    depends=["python/simil/_core.h", "include/simil/simil.h"],
    libraries=[":libsimil.so"],  # the shared library, never libsimil.a beside it
    extra_compile_args=["-std=c11", "-Wall", "-Wextra"],
    extra_link_args=["-Wl,-rpath,$ORIGIN"],
)

setup(
    version=library_version(),
    ext_modules=[core],
    cmdclass={"build_ext": BuildExtWithLibsimil},
    # Keep setuptools' own build folders away from build/, the CMake tree of
    # scripts/test.sh.
    options={"build": {"build_base": "build-python/setuptools"}},
)
