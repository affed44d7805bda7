"""``python -m hango.cli``: the ``hango`` command without the console script."""

import sys

from hango.cli import main

sys.exit(main())
