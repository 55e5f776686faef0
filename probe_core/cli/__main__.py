"""``python -m probe_core.cli``: the ``probe`` command."""

import sys

from probe_core.cli import main

sys.exit(main())
