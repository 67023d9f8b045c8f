from fenceline.cli import main

raise SystemExit(main())
