"""The public API (``perfsuite/__init__.py``): every exported name resolves, unknown names say so."""

import pytest

import perfsuite


@pytest.mark.parametrize("name", [n for n in perfsuite.__all__ if n != "__version__"])
def test_every_exported_name_resolves_to_its_module_s_object(name):
    value = getattr(perfsuite, name)
    module = __import__(perfsuite._EXPORTS[name], fromlist=[name])
    assert value is getattr(module, name)


def test_named_values_are_exported_as_string_enums():
    assert (perfsuite.Mode.FORWARD, perfsuite.Device.CUDA, perfsuite.FullyMaskedRows.NAN) == (
        "forward",
        "cuda",
        "nan",
    )


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'paired_ratio'"):
        _ = perfsuite.paired_ratio
