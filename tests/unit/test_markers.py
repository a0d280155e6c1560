"""Marker outputs stay singletons, so ``is`` comparisons on released outputs keep working."""

import copy
import pickle

from stream_dp.mechanisms import THRESHOLD, UNLISTED
from stream_dp.mechanisms._markers import Marker


def test_markers_are_singletons_per_name_through_copy_and_pickle():
    assert Marker("THRESHOLD") is THRESHOLD and THRESHOLD is not UNLISTED
    for marker in (THRESHOLD, UNLISTED):
        assert copy.copy(marker) is marker and copy.deepcopy(marker) is marker
        assert pickle.loads(pickle.dumps(marker)) is marker
    assert (repr(THRESHOLD), repr(UNLISTED)) == ("THRESHOLD", "UNLISTED")
