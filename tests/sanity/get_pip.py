"""ansible-test's pip bootstrap, for machines that reach PyPI but not ci-files.testing.ansible.com.

`ansible-test sanity --venv` creates each virtual environment without pip and runs get-pip.py, downloaded
from ci-files.testing.ansible.com unless ~/.ansible/test/cache/get_pip_<version>.py exists: `make sanity`
puts this file there, and beside it, in get_pip_wheels/, the pip wheel it fetched with the ordinary pip
client. This takes get-pip.py's arguments (pip's install options, the packages such as pip==24.2, and
get-pip's own --no-setuptools and --no-wheel), bootstraps the pip bundled with Python (ensurepip, offline)
and installs the packages from that directory alone: ansible-test passes no pip settings on (index,
certificate authority), which the pip from 24.2 on no longer needs (it trusts the system's certificates).
"""

import ensurepip
import os
import subprocess
import sys

GET_PIP_ONLY = {"--no-setuptools", "--no-wheel"}
WHEELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "get_pip_wheels")

ensurepip.bootstrap()
args = ["--no-index", "--find-links", WHEELS, *[a for a in sys.argv[1:] if a not in GET_PIP_ONLY]]
sys.exit(subprocess.call([sys.executable, "-m", "pip", "install", *args]))
