"""Users' own attention functions as suite variants.

Two ways in, both checked like the built-ins (signature, equivalence, profiler, timing):

* on the command line: ``--perfsuite-variant package.module:function`` (repeatable), or in the
  ``perfsuite_user_variants`` configuration key, one entry per function;
* from an installed package: an entry point in the group ``perfsuite.variants`` whose object
  is a variant function (registered under the entry point's name) or a module whose
  functions register themselves with ``@register_variant``.

A function that is not registered yet is registered under its own name, with the defaults
of ``register_variant`` (no expected score copies, fully masked rows must be zeros); a
function decorated with ``@register_variant`` keeps what its decorator declared.

An entry may bind the function to its model's case sets, as ``register_variant(case_sets=[...])``
does (``parse_variant_entry``): ``mypkg.attn:gemma_attention case_sets=model-gemma-2-2b,masks``.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata
import importlib.util
import inspect
import pkgutil
import dataclasses
import sys
from pathlib import Path
from types import ModuleType

from perfsuite.attention.case_sets import get_case_set
from perfsuite.variants import registry

ENTRY_POINT_GROUP = "perfsuite.variants"


_LOADED: list[str] = []  # names of the variants loaded from specs and entry points, in order


_SPECS: dict[str, str] = {}  # variant name -> the ``module:function`` spec that loaded it


def variant_spec(name: str) -> str | None:
    """The ``module:function`` spec a user variant was loaded from (``load_variant_spec``), or None
    (a built-in, or an entry point, which every run loads)."""
    return _SPECS.get(name)


def loaded_user_variants() -> tuple[str, ...]:
    """Names of the variants ``load_variant_spec`` and ``load_entry_point_variants`` returned so far."""
    return tuple(_LOADED)


def _loaded(names: list[str]) -> list[str]:
    _LOADED.extend(n for n in names if n not in _LOADED)
    return names


# Variants a ``--perfsuite-variant`` import registered besides the named function, kept (by the
# function's id) so that naming one of them later restores what its decorator declared.
_HELD: dict[int, registry.Variant] = {}


def _register_function(name: str, fn, source: str) -> str:
    for known in registry.registered_variants():
        if known.fn is fn:
            return known.name  # registered by its own decorator
    held = _HELD.pop(id(fn), None)
    if held is not None and held.fn is fn:
        try:
            registry.add_variant(held)
        except ValueError as exc:
            raise ValueError(f"{source}: {exc}") from None
        return held.name
    try:
        doc = (inspect.getdoc(fn) or source).splitlines()[0]
        registry.register_variant(name, f"user variant from {source}: {doc}")(fn)
    except TypeError as exc:
        raise ValueError(f"{source}: {exc}") from None
    return name


def _install_hint(exc: ImportError) -> str:
    """When the missing module is a package in a source folder here or above (``src/myattn`` or
    ``myattn``), the install the user forgot; when its package is installed and only a module in
    it is missing (a typo), that, with the closest module name; else nothing."""
    missing = getattr(exc, "name", None) or ""
    top = missing.partition(".")[0]
    if not top or not isinstance(exc, ModuleNotFoundError):
        return ""
    if missing != top and importlib.util.find_spec(top) is not None:
        parent_name, _, leaf = missing.rpartition(".")
        try:
            parent = importlib.import_module(parent_name)
        except ImportError:
            return ""
        names = [m.name for m in pkgutil.iter_modules(getattr(parent, "__path__", []))]
        close = difflib.get_close_matches(leaf, names, n=1)
        return f"; {parent_name} is installed, but has no module {leaf!r}" + (
            f": did you mean {parent_name}.{close[0]}?" if close else ""
        )
    here = Path.cwd().resolve()
    for folder in (here, *here.parents):
        if (folder / "src" / top).is_dir() or (folder / top / "__init__.py").is_file():
            return (
                f"; {top} is in {folder} but not installed for {sys.executable}: "
                f"run `{Path(sys.executable).name} -m pip install -e {folder}` (or `pip install -e .` there)"
            )
        if (folder / ".git").exists():
            break
    return ""


# the keys an entry may carry after its ``module:function``, with the form of their value
ENTRY_KEYS = {"case_sets": "SET[,SET...]"}


@dataclasses.dataclass(frozen=True)
class VariantEntry:
    """One user-variant entry: ``spec`` (``module:function``) and the ``case_sets`` it binds the
    variant to (``Variant.case_sets``; empty: no binding); ``text``: the entry as written."""

    spec: str
    case_sets: tuple[str, ...] = ()
    text: str = ""


def _allowed_keys() -> str:
    return ", ".join(f"{key}={form}" for key, form in ENTRY_KEYS.items())


def parse_variant_entry(text: str) -> VariantEntry:
    """``module:function`` alone, or followed by ``key=value`` words (``ENTRY_KEYS``):
    ``mypkg.attn:gemma_attention case_sets=model-gemma-2-2b,masks`` binds the variant to those
    named case sets (``perfsuite.attention.case_sets``), comma-separated, as
    ``register_variant(..., case_sets=[...])`` does.

    Raises:
        ValueError: a word that is not ``key=value``, an unknown key, an empty value or an
            unknown case set; the message names the entry, the bad word and what is allowed
            (the known case sets for an unknown one). ``module:function`` itself is checked
            when it is loaded (``load_variant_spec``).
    """
    words = text.split()
    if not words:
        raise ValueError(
            f"variant entry {text!r} is empty; allowed: module:function [{_allowed_keys()}]"
        )
    spec, case_sets = words[0], ()
    for word in words[1:]:
        key, sep, value = word.partition("=")
        if not sep or key not in ENTRY_KEYS:
            raise ValueError(
                f"variant entry {text!r}: {word!r} is not a known key=value; allowed after "
                f"module:function: {_allowed_keys()}"
            )
        names = [n for n in value.split(",") if n]
        if not names:
            raise ValueError(
                f"variant entry {text!r}: {key}= has no value; allowed: {key}={ENTRY_KEYS[key]}"
            )
        for name in names:
            try:
                get_case_set(name)
            except ValueError as exc:
                raise ValueError(f"variant entry {text!r}: {exc}") from None
        case_sets = tuple(dict.fromkeys(case_sets + tuple(names)))
    return VariantEntry(spec, case_sets, " ".join(words))


def split_variant_entries(text: str) -> list[str]:
    """Entries from whitespace-separated text (a joined TOML list, a one-line value): each
    ``module:function`` word starts an entry, the ``key=value`` words after it belong to it.
    ``"a:f case_sets=x,y b:g"`` -> ``["a:f case_sets=x,y", "b:g"]``."""
    entries: list[list[str]] = []
    for word in text.split():
        if entries and "=" in word and ":" not in word.partition("=")[0]:
            entries[-1].append(word)
        else:
            entries.append([word])
    return [" ".join(words) for words in entries]


_BOUND_BY_ENTRY: dict[str, str] = {}  # variant name -> the entry that bound it to case sets


def bound_by_entry(name: str) -> str | None:
    """The entry (``module:function case_sets=...``) that bound variant ``name`` to its case sets,
    or None (bound by ``register_variant(case_sets=...)``, or not bound)."""
    return _BOUND_BY_ENTRY.get(name)


def load_variant_spec(spec: str) -> str:
    """Import ``module:function`` and register that function only; returns the variant name.

    ``spec`` is an entry (``parse_variant_entry``): with ``case_sets=SET,SET`` the variant is bound
    to those case sets (``registry.bind_case_sets``), replacing what its decorator declared.

    Importing the module runs every ``@register_variant`` in it; the variants it registered
    besides the named function are unregistered again (and restored when a later spec names
    them), so ``--perfsuite-variant mod:fast`` runs ``fast`` and not the module's other variants.

    Raises:
        ValueError: malformed spec or entry (``parse_variant_entry``), missing module or
            function, wrong signature, or a name already taken by another variant; the message
            names the spec.
    """
    entry = parse_variant_entry(spec)
    name = _load_function(entry.spec)
    if entry.case_sets:
        registry.bind_case_sets(name, entry.case_sets)
        _BOUND_BY_ENTRY[name] = entry.text
    return name


def _load_function(spec: str) -> str:
    """``load_variant_spec`` of a bare ``module:function``."""
    module_name, sep, function_name = spec.partition(":")
    if not sep or not module_name or not function_name:
        hint = (
            f"; did you mean {spec.rpartition('.')[0]}:{spec.rpartition('.')[2]}?"
            if "." in spec and not sep
            else ""
        )
        raise ValueError(f"variant spec {spec!r} is not package.module:function{hint}")
    before = set(registry.variant_names())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(
            f"variant spec {spec!r}: cannot import {module_name!r} ({exc}){_install_hint(exc)}"
        ) from None
    fn = getattr(module, function_name, None)
    for name in [n for n in registry.variant_names() if n not in before]:
        if registry.get_variant(name).fn is not fn:
            held = registry.unregister_variant(name)
            _HELD[id(held.fn)] = held
    if not callable(fn):
        raise ValueError(
            f"variant spec {spec!r}: module {module_name!r} has no function {function_name!r}"
        )
    name = _loaded([_register_function(function_name, fn, spec)])[0]
    _SPECS[name] = spec
    return name


def load_entry_point_variants() -> list[str]:
    """Register the variants of every installed ``perfsuite.variants`` entry point; returns their names.

    Raises ``ValueError`` naming the entry point when one cannot be loaded or registered.
    """
    names = []
    for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        source = f"entry point {entry.name} = {entry.value}"
        try:
            loaded = entry.load()
        except Exception as exc:  # any import error of a user package
            raise ValueError(f"{source}: cannot be loaded ({type(exc).__name__}: {exc})") from None
        if isinstance(loaded, ModuleType):
            names += [
                v.name for v in registry.registered_variants() if v.fn.__module__ == loaded.__name__
            ]
        else:
            names.append(_register_function(entry.name, loaded, source))
    return _loaded(names)
