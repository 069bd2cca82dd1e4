import math
import mmap

import pytest
import torch

from oar.training.memory import PeakMemory, _reset_rss_high_water

MIB = 2**20


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU (resident set) counter")
def test_phase_peak_sees_only_its_own_phase():
    if not _reset_rss_high_water():
        pytest.skip("/proc/self/clear_refs is not writable here: phase peaks are NaN by design")
    tracker = PeakMemory()
    with tracker.phase() as heavy:
        # 300 MiB mapped and every page touched, then unmapped: returned to the system whatever the
        # allocator's state (after a long test session malloc may keep a freed tensor's pages)
        block = mmap.mmap(-1, 300 * MIB)
        for offset in range(0, 300 * MIB, mmap.PAGESIZE):
            block[offset] = 1
        block.close()
    with tracker.phase() as light:
        torch.zeros(16)
    assert heavy.mb - light.mb > 200  # the second phase does not inherit the first one's peak
    assert tracker.process_peak_mb() >= heavy.mb


def test_phase_peak_is_nan_when_the_counter_cannot_be_reset(monkeypatch):
    import oar.training.memory

    monkeypatch.setattr(oar.training.memory.torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(oar.training.memory, "_reset_rss_high_water", lambda: False)
    tracker = PeakMemory()
    with tracker.phase() as peak:
        pass
    assert math.isnan(peak.mb)
    assert tracker.process_peak_mb() > 0
