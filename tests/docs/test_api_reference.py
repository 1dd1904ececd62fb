"""`make docs`: pdoc renders the repository's ``#:`` comments and ``:param:`` entries."""

from __future__ import annotations

import textwrap
from pathlib import Path

from scripts.api_reference import build, comment_docs

SAMPLE = '''
"""A sample module."""

#: The answer,
#: on two lines.
ANSWER = 42
UNDOCUMENTED = 1


class Sample:
    """A sample class.

    :param size: how big. Default: 3.
    """

    #: A class constant.
    KIND = "a"

    def __init__(self, size: int = 3) -> None:
        #: How big it is.
        self.size = size
'''


def test_comment_docs_are_read_for_module_class_and_instance_names():
    assert comment_docs(SAMPLE) == {
        "ANSWER": "The answer,\non two lines.",
        "KIND": "A class constant.",
        "size": "How big it is.",
    }


def test_the_reference_shows_comment_docs_and_params(tmp_path: Path):
    module = tmp_path / "docsample.py"
    module.write_text(textwrap.dedent(SAMPLE), encoding="utf-8")
    index = build(tmp_path / "out", modules=(str(module),))
    page = (tmp_path / "out" / "docsample.html").read_text(encoding="utf-8")
    assert index.is_file()
    for text in ("The answer,", "A class constant.", "How big it is.", "how big. Default: 3."):
        assert text in page, text
