"""Device memory of an emulated GPU: a model of PyTorch's CUDA caching allocator."""

from emulator.memory.allocator import CachingAllocator, OutOfMemory, format_size, round_size, segment_size

__all__ = ["CachingAllocator", "OutOfMemory", "format_size", "round_size", "segment_size"]
