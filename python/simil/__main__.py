"""python -m simil ARGS: the simil command-line tool that comes with the package.

The package holds the tool (simil/bin/simil, linked statically against
libsimil); this runs it with the same arguments, in place of the Python
process.  The installed `simil` script does the same.
"""
import os
import sys


def tool_path():
    """Where the simil command of this package is."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "simil")


def main():
    path = tool_path()
    if not os.access(path, os.X_OK):
        sys.exit(f"simil: the command-line tool is missing from the package ({path}); "
                 "reinstall it with pip install .")
    os.execv(path, [path] + sys.argv[1:])


if __name__ == "__main__":
    main()
