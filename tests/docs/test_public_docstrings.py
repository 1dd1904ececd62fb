"""Every public prop, method and attribute is documented, read from source with ``ast``.

No import of the library, so no jsii: the fast tier runs it. ``make docs`` renders the same
docstrings as the API reference.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from scripts.public_api import param_docs, public_api, undocumented

KNOWN_GAPS_FILE = Path(__file__).with_name("docstring_gaps.txt")


def known_gaps() -> set[str]:
    lines = KNOWN_GAPS_FILE.read_text(encoding="utf-8").splitlines()
    return {line.strip() for line in lines if line.strip() and not line.startswith("#")}


def test_no_public_prop_method_or_attribute_is_undocumented():
    gaps = undocumented()
    new = [str(gap) for gap in gaps if gap.key not in known_gaps()]
    assert not new, "document these (see scripts/public_api.py for the conventions):\n" + (
        "\n".join(new)
    )


def test_the_list_of_known_gaps_only_shrinks():
    fixed = sorted(known_gaps() - {gap.key for gap in undocumented()})
    assert not fixed, f"documented now: delete from {KNOWN_GAPS_FILE.name}: {fixed}"


def test_the_constructors_the_issue_names_are_checked():
    classes, functions = public_api()
    names = {cls.name for cls in classes} | {f.callable.qualname for f in functions}
    assert {
        "IdempotentModelStep",
        "ProspectUploaderStack",
        "EventBusV2",
        "RetryBudget",
        "ModelStepHandler",
    } <= names
    step = next(cls for cls in classes if cls.name == "IdempotentModelStep")
    props = {p.name: p for p in step.constructor().parameters}
    assert "event_pattern" in props and props["event_pattern"].default is None
    assert props["max_tokens"].default == "defaults.DEFAULT_MAX_TOKENS"
    assert "default" in props["max_tokens"].doc.lower()
    handler = next(cls for cls in classes if cls.name == "ModelStepHandler")
    from_package = next(c for c in handler.callables if c.qualname.endswith(".from_package"))
    assert from_package.is_constructor
    assert [p.name for p in from_package.parameters][:3] == ["path", "handler", "requirements"]


def test_param_entries_span_lines_and_stop_at_the_next_field():
    doc = textwrap.dedent(
        """
        Summary.

        :param size: how big,
            see :class:`Thing`. Default: 3.
        :param name: its name.
        :returns: nothing.
        """
    )
    assert param_docs(doc) == {
        "size": "how big, see :class:`Thing`. Default: 3.",
        "name": "its name.",
    }


def _package(tmp_path: Path, source: str) -> Path:
    root = tmp_path / "lib"
    root.mkdir()
    (root / "__init__.py").write_text(
        'from .things import Thing, make\n__all__ = ["Thing", "make"]\n', encoding="utf-8"
    )
    (root / "things.py").write_text(textwrap.dedent(source), encoding="utf-8")
    return root


def test_gaps_are_found_in_a_package_with_every_kind(tmp_path: Path):
    root = _package(
        tmp_path,
        '''
        class Thing:
            """A thing with ``listed``.

            :param size: how big.
            """

            #: Documented above.
            KIND = "a"
            OTHER = "b"
            declared: int
            """Declared here, assigned by a step method."""

            def __init__(self, scope, id, *, size: int = 3, colour: str = "red") -> None:
                self.listed = 1
                #: A comment above.
                self.commented = 2
                self._private = 3
                self._build()

            def _build(self) -> None:
                self.built_in_a_step = 4
                self.declared = 5

            @classmethod
            def from_name(cls, name: str) -> "Thing":
                """Another constructor."""

            def grow(self, by: int = 1) -> None:
                pass

            @property
            def area(self) -> int:
                return 1


        def make(count: int = 1) -> Thing:
            """Make one.

            :param count: how many. Default: 1.
            """
        ''',
    )
    assert sorted(str(g) for g in undocumented(root)) == sorted(
        [
            "lib/things.py:14 Thing.__init__(size): its ':param' entry does not state the "
            "default (3)",
            "lib/things.py:14 Thing.__init__(colour): no ':param' entry",
            "lib/things.py:22 Thing.built_in_a_step: no '#:' comment, docstring or "
            "``mention`` in the class docstring",
            "lib/things.py:26 Thing.from_name(name): no ':param' entry",
            "lib/things.py:29 Thing.grow: no docstring",
            "lib/things.py:33 Thing.area: no '#:' comment, docstring or ``mention`` in the "
            "class docstring",
            "lib/things.py:10 Thing.OTHER: no '#:' comment, docstring or ``mention`` in the "
            "class docstring",
        ]
    )
