"""`python -m gpu_parallel_kit.cli`: the `gpk` command."""

import sys

from . import main

sys.exit(main())
