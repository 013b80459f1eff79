import sys

from compare.cli import main

sys.exit(main())
