"""Other trainers' torch.save dumps read without running code from them: tensors,
numpy arrays of numbers (miles's MoE routing replay) and plain containers; anything
else refused, naming the file and the object."""

from __future__ import annotations

import decimal
import io

import numpy as np
import pytest
import torch

from trainer.importers.tailing import BadImportFile
from trainer.importers.torch_dumps import load_plain


def test_numpy_arrays_of_numbers_load_as_arrays(tmp_path):
    experts = np.arange(24, dtype=np.uint8).reshape(4, 3, 2)
    path = tmp_path / "1.pt"
    torch.save({"e": experts, "s": np.float32(0.5), "t": torch.ones(2)}, path)
    got = load_plain(path)
    assert got["e"].dtype == np.uint8 and (got["e"] == experts).all()
    assert float(got["s"]) == 0.5 and got["t"].tolist() == [1.0, 1.0]


def test_arrays_pickled_under_numpy_1s_module_names_load_too(tmp_path):
    # numpy 1 pickles its arrays as numpy.core.multiarray._reconstruct (numpy 2:
    # numpy._core); a trainer on numpy 1 writes those names.
    buf = io.BytesIO()
    torch.save({"e": np.zeros(3, np.int32)}, buf, _use_new_zipfile_serialization=False)
    raw = buf.getvalue()
    assert b"numpy._core.multiarray" in raw
    path = tmp_path / "old.pt"
    path.write_bytes(raw.replace(b"numpy._core.multiarray", b"numpy.core.multiarray"))
    assert load_plain(path)["e"].tolist() == [0, 0, 0]


@pytest.mark.parametrize(
    "value, name",
    [
        (decimal.Decimal("1.5"), "decimal.Decimal"),
        (np.array([{"a": 1}], dtype=object), "numpy.dtypes.ObjectDType"),
    ],
)
def test_any_other_object_is_refused_naming_the_file_and_the_object(
    tmp_path, value, name
):
    path = tmp_path / "3.pt"
    torch.save({"samples": [], "metadata": {"x": value}}, path)
    with pytest.raises(BadImportFile) as caught:
        load_plain(path)
    assert str(caught.value).startswith(f"{path}: holds a pickled {name}, which")
