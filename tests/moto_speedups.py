"""Parses moto repeats on every request it serves, each done once per process instead.

moto's DynamoDB parses a request's ``UpdateExpression`` from scratch twice per ``UpdateItem``
(once to check the names it uses, once to apply it), deep-copies the tree before validating
it, and lexes every ``ConditionExpression`` character by character; its EventBridge builds a
new JSONPath parser (with its lexer, by reflection) for each of the eight paths of a target's
input template, for every event. A test's step sends the same few expressions thousands of
times: in a fault-schedule module these parses were about 15 % of its CPU. Each result is a
function of the expression text alone, so a cache keyed on the text hands back what moto
would have built:

- :func:`UpdateExpressionParser.make <moto.dynamodb.parsing.expressions>` keeps one tree per
  expression. moto's callers only read that tree (``find_clauses``) or hand it to a
  ``Validator``, which works on a deep copy; that copy is now rebuilt from a pickle of the
  tree, taken once (the same objects ``copy.deepcopy`` would build, about five times faster).
  Each of the validator's ten passes asked, for every node, which node classes it processes
  (``DepthFirstTraverser.nodes_to_be_processed``, a new tuple from a new dict each time):
  the classes of every pass are fixed by its class, so they are kept per class.
- ``ConditionExpressionParser._lex_condition_expression`` keeps the tokens (immutable named
  tuples) per expression; the attribute names and values are still resolved per request.
- ``jsonpath_ng.ext.parse`` keeps one parsed path per path text (a ``JSONPath`` is not
  changed by ``find``).

An expression moto rejects raises as before, every time (nothing is cached for it).
:func:`install` patches only the moto modules already imported: a run that needs no moto
never imports it.
"""

from __future__ import annotations

import copy
import functools
import pickle
import sys
from collections import deque
from typing import Any

#: Distinct expressions kept per cache; past it, the parse runs as moto's own (tests that
#: generate expressions must not grow the process without bound).
MAX_CACHED = 4096


def install() -> None:
    """Cache moto's expression parses in this process (idempotent)."""
    if "moto.dynamodb.parsing.expressions" in sys.modules:
        _cache_update_expressions()
    if "moto.dynamodb.comparisons" in sys.modules:
        _cache_condition_tokens()
    if "moto.core" in sys.modules:
        _cache_input_template_paths()


def _cache_update_expressions() -> None:
    from moto.dynamodb.parsing import validators
    from moto.dynamodb.parsing.ast_nodes import DepthFirstTraverser
    from moto.dynamodb.parsing.expressions import UpdateExpressionParser

    if getattr(UpdateExpressionParser.make, "_cached", False):
        return
    parse = UpdateExpressionParser.make
    #: expression -> its tree; tree id -> (tree, its pickle). The tree is kept alive by the
    #: first map, so its id is never reused while the second holds it.
    trees: dict[str, Any] = {}
    pickles: dict[int, tuple[Any, bytes]] = {}

    def make(expression: str) -> Any:
        tree = trees.get(expression)
        if tree is None:
            tree = parse(expression)
            if len(trees) >= MAX_CACHED:
                return tree
            trees[expression] = tree
            pickles[id(tree)] = (tree, pickle.dumps(tree, pickle.HIGHEST_PROTOCOL))
        return tree

    def deepcopy(value: Any, memo: dict[int, Any] | None = None) -> Any:
        kept = pickles.get(id(value))
        if kept is not None and kept[0] is value and memo is None:
            return pickle.loads(kept[1])
        return copy.deepcopy(value, memo)

    make._cached = True  # type: ignore[attr-defined]
    UpdateExpressionParser.make = make  # type: ignore[method-assign,assignment]
    validators.deepcopy = deepcopy  # type: ignore[attr-defined]

    kinds_of = DepthFirstTraverser.nodes_to_be_processed
    kinds: dict[type, tuple[type, ...]] = {}

    def nodes_to_be_processed(self: DepthFirstTraverser) -> tuple[type, ...]:
        found = kinds.get(type(self))
        if found is None:
            found = kinds[type(self)] = kinds_of(self)
        return found

    DepthFirstTraverser.nodes_to_be_processed = nodes_to_be_processed  # type: ignore[method-assign]


def _cache_condition_tokens() -> None:
    from moto.dynamodb.comparisons import ConditionExpressionParser

    lex = ConditionExpressionParser._lex_condition_expression
    if getattr(lex, "_cached", False):
        return
    tokens: dict[str, tuple[Any, ...]] = {}

    def _lex_condition_expression(self: ConditionExpressionParser) -> deque[Any]:
        expression = self.condition_expression or ""
        found = tokens.get(expression)
        if found is None:
            lexed = lex(self)
            if len(tokens) >= MAX_CACHED:
                return lexed
            found = tokens[expression] = tuple(lexed)
        return deque(found)

    _lex_condition_expression._cached = True  # type: ignore[attr-defined]
    ConditionExpressionParser._lex_condition_expression = _lex_condition_expression  # type: ignore[method-assign]


def _cache_input_template_paths() -> None:
    """Wrap ``jsonpath_ng.ext.parse`` the first time moto's EventBridge builds an input
    template (it imports the parser then; a run that sends no event never imports it)."""
    from moto.events import utils

    template = utils.EventTemplateParser
    if getattr(template.parse, "_cached", False):
        return
    build = template.parse

    def parse(*args: Any, **kwargs: Any) -> Any:
        import jsonpath_ng.ext

        if not hasattr(jsonpath_ng.ext.parse, "cache_info"):
            jsonpath_ng.ext.parse = functools.lru_cache(maxsize=MAX_CACHED)(jsonpath_ng.ext.parse)
        template.parse = staticmethod(build)  # type: ignore[method-assign,assignment]
        return build(*args, **kwargs)

    parse._cached = True  # type: ignore[attr-defined]
    template.parse = staticmethod(parse)  # type: ignore[method-assign,assignment]
