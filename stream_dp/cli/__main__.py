import sys

from stream_dp.cli import main

sys.exit(main())
