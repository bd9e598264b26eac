"""Device memory of an emulated GPU: PyTorch's CUDA caching allocator, in one place.

    device_memory.cpp  the allocator an emulated rank runs (part of the fake device library), and storages
                       that give their block back when they die
    allocator.py       its Python twin: the readable reference model (a test holds the two together)
    accounting.py      DeviceMemory: fake tensors' storages through the allocator; OOM like a real GPU
"""

from emulator.memory.allocator import CachingAllocator, OutOfMemory, format_size, round_size, segment_size

__all__ = ["CachingAllocator", "OutOfMemory", "format_size", "round_size", "segment_size"]
