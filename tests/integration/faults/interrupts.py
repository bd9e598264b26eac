"""Children that Ctrl-C reaches as it would from a shell."""

import signal


def deliverable_ctrl_c() -> None:
    """`preexec_fn` for a child a test interrupts: SIGINT unblocked and at its default, whatever the test
    process carries (an ignored or blocked SIGINT is inherited across exec, and Python then installs no
    KeyboardInterrupt handler, so the child would never see the Ctrl-C the test sends)."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
