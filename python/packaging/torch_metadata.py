"""scikit-build-core metadata for the wheel: its version names the torch it was built for
(0.2.0+torch2.15), and it requires that torch's minor version, whose c10d C++ ABI it uses.
Read from the torch of the Python that runs the build (-I: pip's build isolation does not hide
the torch installed beside that Python)."""
import re
import subprocess
import sys

_BASE_VERSION_FILE = "CMakeLists.txt"


def _torch_version():
    out = subprocess.run([sys.executable, "-I", "-c", "import torch; print(torch.__version__)"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError("rdmacoll-torch builds against the torch of the Python that builds it, "
                           "and that Python has none: pip install torch first\n" + out.stderr)
    m = re.match(r"(\d+)\.(\d+)", out.stdout.strip())
    return int(m.group(1)), int(m.group(2))


def _project_version():
    with open(_BASE_VERSION_FILE) as f:
        return re.search(r"project\(rdmacoll VERSION ([0-9.]+)", f.read()).group(1)


def dynamic_metadata(field, settings=None):
    major, minor = _torch_version()
    if field == "version":
        return f"{_project_version()}+torch{major}.{minor}"
    if field == "dependencies":
        return [f"torch=={major}.{minor}.*"]
    raise RuntimeError(f"no metadata field {field!r} here")
