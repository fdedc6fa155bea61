import sys

from refengine.server.cli import main

sys.exit(main())
