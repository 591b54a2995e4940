"""Sphinx's configuration for the user guide: MyST Markdown pages, the lab's notebooks rendered
with the outputs their executed copies carry (never executed here), and the API reference read
from the public API's docstrings.

Build it with `python docs/build.py` (it stages the notebooks in `lab/`); the build is strict,
so a broken link or a reference that does not resolve fails it.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(
    0, str(ROOT)
)  # the API reference imports the kit from this checkout

from gpu_parallel_kit.version import __version__  # noqa: E402

project = "gpu_parallel_kit"
release = version = __version__
extensions = ["myst_nb", "sphinx.ext.autodoc", "sphinx.ext.napoleon"]
exclude_patterns = ["_build", "**/.ipynb_checkpoints"]

# MyST: `#heading` anchors for links between pages, `:::` fences and definition lists.
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence", "deflist"]

# The notebooks arrive executed (tests/test_notebooks.py's copies, or build.py's own run):
# rendering them never starts a kernel.
nb_execution_mode = "off"
nb_merge_streams = True

# The kit's docstrings mark code with single backquotes, as Markdown does; in reST that is the
# default role, so it renders as code here too.
default_role = "code"
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
# A long signature is laid out one parameter a line, with its type.
python_maximum_signature_line_length = 88
autodoc_typehints_format = "short"
autodoc_default_options = {"members": True, "undoc-members": False}
# TensorFlow and JAX stay unloaded: the public API imports neither.

html_theme = "furo"
html_title = f"gpu_parallel_kit {release}"
html_static_path = ["_static"]
html_css_files = ["gpk.css"]
smartquotes = (
    False  # options such as --data stay two hyphens in the rendered docstrings
)
