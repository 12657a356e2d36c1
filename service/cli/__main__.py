"""``python -m service.cli``: the same as the ``fedqa`` command."""

import sys

from service.cli.main import main

sys.exit(main())
