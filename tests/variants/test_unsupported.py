"""A library that is missing or fails to import is a named reason, never an error."""

from perfsuite.variants.unsupported import optional_module


def test_an_importable_module_comes_back_with_no_reason():
    module, reason = optional_module("json", "pip install json")
    assert module is not None and module.__name__ == "json" and reason is None


def test_a_missing_module_names_the_error_and_how_to_install_it():
    module, reason = optional_module(
        "perfsuite_no_such_library", "pip install perfsuite-no-such-library"
    )
    assert module is None
    assert reason.startswith(
        "perfsuite_no_such_library is not importable (ModuleNotFoundError: No module named"
    )
    assert reason.endswith("; pip install perfsuite-no-such-library")
