from emulator.bench.emulation import main

raise SystemExit(main())
