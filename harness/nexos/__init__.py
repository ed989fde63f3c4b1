"""nexos: build, boot, probe, compare and grade the NexOS teaching kernel."""

__version__ = "0.1.0"
