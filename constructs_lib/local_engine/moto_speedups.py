"""Work moto repeats on every request it serves, each done once per process instead.

A local run's handlers send the same few DynamoDB expressions, EventBridge input templates
and SQS attribute reads thousands of times, and moto redoes the same pure work for each:

- its DynamoDB parses a request's ``UpdateExpression`` from scratch twice per ``UpdateItem``
  (once to check the names it uses, once to apply it), deep-copies the tree before
  validating it, and lexes every ``ConditionExpression`` character by character;
- its EventBridge builds a new JSONPath parser (with its lexer, by reflection) for each of
  the eight paths of a target's input template, for every event;
- for every request, ``BaseResponse.call_action`` lists its response class's methods (an
  ``inspect.getmembers``), and SQS's ``Queue.attributes`` converts every attribute name from
  CamelCase, a loop over the characters.

Each result is a function of its inputs alone (the expression text, the names and values,
a class, a string), so a cache keyed on all of them hands back what moto would have built;
in a local run's profile these parses were about a fifth of its CPU. In detail:

- :func:`UpdateExpressionParser.make <moto.dynamodb.parsing.expressions>` keeps one tree per
  expression. moto's callers only read that tree (``find_clauses``) or hand it to a
  ``Validator``, which works on a deep copy; that copy is now rebuilt from a pickle of the
  tree, taken once (the same objects ``copy.deepcopy`` would build, about five times faster).
  Each of the validator's ten passes asked, for every node, which node classes it processes
  (``DepthFirstTraverser.nodes_to_be_processed``, a new tuple from a new dict each time):
  the classes of every pass are fixed by its class, so they are kept per class.
- ``ConditionExpressionParser._lex_condition_expression`` keeps the tokens (immutable named
  tuples) per expression; the attribute names and values are still resolved per request.
- ``jsonpath.parse`` keeps one parsed path per path text (a ``JSONPath`` is not
  changed by ``find``).

Later, the same rule for more of what moto redoes per request (each described where it is
installed): the update validator's class tests and its first three passes, condition trees,
each backend's URL map, the keys a response serializer reads from a ``dict``, the lookup of
a service's backend map, and moto's two name helpers.

An expression moto rejects raises as before, every time (nothing is cached for it). Every
cache is bounded (:data:`MAX_CACHED`). :func:`install` is called by :func:`.local_aws.local_aws`
when a run starts moto; it is idempotent, and what it installs stays for the process (it
changes no answer, only how often moto works one out). Each patch is marked ``_cached``, so
another copy of these caches installed first (a test suite's) is not stacked on.
"""

from __future__ import annotations

import copy
import functools
import importlib
import pickle
import sys
from collections import deque
from typing import Any

#: Distinct expressions kept per cache; past it, the parse runs as moto's own (tests that
#: generate expressions must not grow the process without bound).
MAX_CACHED = 4096


def install() -> None:
    """Cache moto's per-request parses and lookups in this process (idempotent; imports the
    moto modules it patches: call it only where moto is used)."""
    _memoize_name_helpers()
    _cache_update_expressions()
    _cache_condition_tokens()
    _cache_input_template_paths()
    _cache_backend_urls()
    _cache_possible_keys()
    _find_known_backends_by_identity()
    importlib.import_module(".moto_requests", __package__).install()  # requests built directly


def _moto(name: str) -> Any:
    """The moto module ``moto.<name>``, untyped: these patches reach into its internals."""
    return importlib.import_module(f"moto.{name}")


def _mark_cached(function: Any) -> None:
    """Mark ``function`` as one of these caches: :func:`install` does not wrap it again."""
    function.__dict__["_cached"] = True


def _memoize_name_helpers() -> None:
    """Cache two of moto's pure helpers that it recomputes on every request it serves.

    For each request, moto's ``BaseResponse.call_action`` lists its response class's methods
    (``method_names_from_class``, an ``inspect.getmembers``), and SQS's ``Queue.attributes``
    converts every attribute name from CamelCase (``camelcase_to_underscores``, a loop over
    the characters). Both are functions of their argument alone (a class, a string), so a
    cache returns what they would: the same names, a tuple where a list was (only ``in`` reads
    it). The moto modules already imported are rebound; those moto imports later bind the
    cached ones, as they import them by name from ``moto.core.utils``."""
    utils = _moto("core.utils")

    if hasattr(utils.camelcase_to_underscores, "cache_info"):
        return
    listing = utils.method_names_from_class
    cached = {
        "camelcase_to_underscores": functools.lru_cache(maxsize=MAX_CACHED)(
            utils.camelcase_to_underscores
        ),
        "method_names_from_class": functools.lru_cache(maxsize=None)(
            lambda clazz: tuple(listing(clazz))
        ),
    }
    originals = {attribute: getattr(utils, attribute) for attribute in cached}
    for name, module in list(sys.modules.items()):
        if name == "moto" or name.startswith("moto."):
            for attribute, function in cached.items():
                if getattr(module, attribute, None) is originals[attribute]:
                    setattr(module, attribute, function)


def _cache_update_expressions() -> None:
    validators = _moto("dynamodb.parsing.validators")
    DepthFirstTraverser = _moto("dynamodb.parsing.ast_nodes").DepthFirstTraverser
    UpdateExpressionParser = _moto("dynamodb.parsing.expressions").UpdateExpressionParser

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

    _mark_cached(make)
    UpdateExpressionParser.make = make
    validators.deepcopy = deepcopy

    kinds_of = DepthFirstTraverser.nodes_to_be_processed
    kinds: dict[type, tuple[type, ...]] = {}

    def nodes_to_be_processed(self: Any) -> tuple[type, ...]:
        found = kinds.get(type(self))
        if found is None:
            found = kinds[type(self)] = kinds_of(self)
        return found

    DepthFirstTraverser.nodes_to_be_processed = nodes_to_be_processed
    _traverse_by_node_class()
    _check_expression_shape_once(pickles)


def _traverse_by_node_class() -> None:
    """Decide moto's per-node class tests once per class.

    The validator's ten passes walk every node of the tree, asking of each whether it is a
    ``Node`` and whether the pass processes it, and ``find_clauses`` asks whether each child
    is an ``Expression`` or a function to descend into. The node classes have ``ABCMeta``
    for their metaclass, so each of those ``isinstance`` calls ran ``ABCMeta.__instancecheck__``
    (nothing registers a virtual subclass of them): about a fifth of a validation. The answer
    depends on the node's class alone, so it is kept per class (and per pass class)."""
    ast_nodes = _moto("dynamodb.parsing.ast_nodes")

    traverser = ast_nodes.DepthFirstTraverser
    node_type = ast_nodes.Node
    is_node: dict[type, bool] = {}
    processes: dict[tuple[type, type], bool] = {}

    def traverse_node_recursively(self: Any, node: Any, child_id: int = -1) -> Any:
        kind = type(node)
        node_like = is_node.get(kind)
        if node_like is None:
            node_like = is_node[kind] = isinstance(node, node_type)
        if node_like:
            parent_node = node.parent
            children = node.children
            if children is not None:
                for i, child_node in enumerate(children):
                    self.pre_processing_of_child(node, i)
                    traverse_node_recursively(self, child_node, i)
            key = (type(self), kind)
            processed = processes.get(key)
            if processed is None:
                processed = processes[key] = isinstance(node, self.nodes_to_be_processed())
            if processed:
                node = self.process(node)
                node.parent = parent_node
                if parent_node:
                    parent_node.children[child_id] = node
        return node

    descend_types = (ast_nodes.Expression, ast_nodes.UpdateExpressionFunction)
    descends: dict[type, bool] = {}

    def find_clauses(self: Any, clause_types: Any) -> list[Any]:
        clauses: list[Any] = []
        for child in self.children or []:
            kind = type(child)
            if kind in clause_types:
                clauses.append(child)
                continue
            descend = descends.get(kind)
            if descend is None:
                descend = descends[kind] = isinstance(child, descend_types)
            if descend:
                clauses.extend(child.find_clauses(clause_types))
        return clauses

    traverser.traverse_node_recursively = traverse_node_recursively
    node_type.find_clauses = find_clauses


def _check_expression_shape_once(pickles: dict[int, tuple[Any, bytes]]) -> None:
    """Run the update validator's first three passes once per expression, names and key.

    ``UpdateExpressionValidator`` starts with three passes that read only the expression's
    tree, its ``ExpressionAttributeNames`` and the table's key attributes (one ``SET`` /
    ``ADD`` / ``REMOVE`` clause each, no overlapping paths, no key attribute updated); they
    change nothing in the tree. Once they passed for a cached tree (``pickles``: the trees
    :func:`_cache_update_expressions` keeps) with the same names and key attributes they pass
    again, so later validations start at the fourth pass. An expression they reject is never
    recorded: it runs them, and raises, every time."""
    validators = _moto("dynamodb.parsing.validators")

    shape_passes = (
        validators.ActionCountValidator,
        validators.OverlappingPathsValidator,
        validators.UpdateHashRangeKeyValidator,
    )
    validator = validators.UpdateExpressionValidator
    init = validator.__init__
    passed: set[tuple[Any, ...]] = set()

    class _Recorded:
        """The shape passes, run in order; their key recorded when all of them passed."""

        def __init__(self, passes: list[Any], key: tuple[Any, ...]) -> None:
            self.passes = passes
            self.key = key

        def traverse(self, node: Any) -> Any:
            for shape_pass in self.passes:
                node = shape_pass.traverse(node)
            if len(passed) < MAX_CACHED:
                passed.add(self.key)
            return node

    def __init__(self: Any, expression: Any, *args: Any, **kwargs: Any) -> None:
        init(self, expression, *args, **kwargs)
        kept = pickles.get(id(expression))
        count = len(shape_passes)
        if (
            kept is None
            or kept[0] is not expression
            or tuple(type(p) for p in self.processors[:count]) != shape_passes
        ):
            return
        names = self.expression_attribute_names
        try:
            key = (
                id(expression),
                None if names is None else tuple(sorted(names.items())),
                tuple(self.table.table_key_attrs),
            )
            hash(key)
        except TypeError:  # names that are not strings: moto's own passes judge them
            return
        rest = self.processors[count:]
        if key in passed:
            self.processors = rest
        else:
            self.processors = [_Recorded(self.processors[:count], key), *rest]

    validator.__init__ = __init__


def _cache_condition_tokens() -> None:
    ConditionExpressionParser = _moto("dynamodb.comparisons").ConditionExpressionParser

    lex = ConditionExpressionParser._lex_condition_expression
    if getattr(lex, "_cached", False):
        return
    tokens: dict[str, tuple[Any, ...]] = {}

    def _lex_condition_expression(self: Any) -> deque[Any]:
        expression = self.condition_expression or ""
        found = tokens.get(expression)
        if found is None:
            lexed: deque[Any] = lex(self)
            if len(tokens) >= MAX_CACHED:
                return lexed
            found = tokens[expression] = tuple(lexed)
        return deque(found)

    _mark_cached(_lex_condition_expression)
    ConditionExpressionParser._lex_condition_expression = _lex_condition_expression
    _cache_condition_trees()


def _frozen(value: Any) -> Any:
    """A hashable image of an expression attribute value (DynamoDB JSON: dicts, lists,
    strings, ...) that equals another's only if both are equal and of the same types;
    TypeError for anything else."""
    kind = type(value)
    if kind is dict:
        return (dict, tuple((name, _frozen(item)) for name, item in value.items()))
    if kind is list:
        return (list, tuple(_frozen(item) for item in value))
    if kind in (str, bytes, int, float, bool) or value is None:
        return (kind, value)
    raise TypeError(f"not an expression attribute value: {kind.__name__}")


def _cache_condition_trees() -> None:
    """Keep each condition's operator tree per expression, names and values.

    moto parses a ``ConditionExpression`` twice per write (once in its request handler, to
    find the names and values it uses, once in the backend, to evaluate it) into a tree of
    operators that only read the item they are given (``Op.expr``); the tree and the names
    and values found are functions of the expression and the two maps alone. On a stopped
    clock a schedule's writes repeat the same conditions with the same values (about three
    parses in five), so a kept tree is handed back, with the names and values it found. A
    condition moto rejects raises every time (nothing is kept for it)."""
    ConditionExpressionParser = _moto("dynamodb.comparisons").ConditionExpressionParser

    parse = ConditionExpressionParser.parse
    if getattr(parse, "_cached", False):
        return
    trees: dict[tuple[Any, ...], tuple[Any, tuple[str, ...], tuple[str, ...]]] = {}

    def cached_parse(self: Any) -> Any:
        if not self.condition_expression:
            return parse(self)
        try:
            key = (
                self.condition_expression,
                _frozen(self.expression_attribute_names),
                _frozen(self.expression_attribute_values),
            )
        except TypeError:
            return parse(self)
        kept = trees.get(key)
        if kept is None:
            names_before = len(self.expr_attr_names_found)
            values_before = len(self.expr_attr_values_found)
            tree = parse(self)
            kept = (
                tree,
                tuple(self.expr_attr_names_found[names_before:]),
                tuple(self.expr_attr_values_found[values_before:]),
            )
            if len(trees) < MAX_CACHED:
                trees[key] = kept
            return tree
        tree, names, values = kept
        self.expr_attr_names_found.extend(names)
        self.expr_attr_values_found.extend(values)
        return tree

    _mark_cached(cached_parse)
    ConditionExpressionParser.parse = cached_parse


def _cache_input_template_paths() -> None:
    """Wrap ``jsonpath.parse`` the first time moto's EventBridge builds an input
    template (it imports the parser then; a run that sends no event never imports it)."""
    utils = _moto("events.utils")

    template = utils.EventTemplateParser
    if getattr(template.parse, "_cached", False):
        return
    build = template.parse

    def parse(*args: Any, **kwargs: Any) -> Any:
        jsonpath: Any = importlib.import_module("jsonpath_ng.ext")

        if not hasattr(jsonpath.parse, "cache_info"):
            jsonpath.parse = functools.lru_cache(maxsize=MAX_CACHED)(jsonpath.parse)
        template.parse = staticmethod(build)
        return build(*args, **kwargs)

    _mark_cached(parse)
    template.parse = staticmethod(parse)


def _cache_backend_urls() -> None:
    """Build each backend class's URL map once per ``MOTO_ENABLE_ISO_REGIONS`` setting.

    moto matches every request against its backend's ``urls``, a property that formats
    every URL pattern of the service for every URL base and partition (a ``re.sub`` each)
    on every request. The map depends only on the backend's ``urls`` module (its
    ``url_bases`` and ``url_paths``, fixed at import) and that setting, so it is built once;
    each caller gets its own copy, as before."""
    settings = _moto("settings")
    BaseBackend = _moto("core.base_backend").BaseBackend

    urls = BaseBackend.urls
    if getattr(urls.fget, "_cached", False):
        return
    build = urls.fget
    maps: dict[tuple[Any, bool], dict[str, Any]] = {}

    def cached_urls(self: Any) -> dict[str, Any]:
        key = (self._url_module, settings.enable_iso_regions())
        found = maps.get(key)
        if found is None:
            found = maps[key] = build(self)
        return dict(found)

    _mark_cached(cached_urls)
    BaseBackend.urls = property(cached_urls)


def _cache_possible_keys() -> None:
    """Work out once per shape which keys moto's response serializer tries on a ``dict``.

    For every member of every response, moto's ``AttributePicker`` builds six alias
    providers and asks each whether it has an alias for the member (the shape's
    serialization name, a prefix of its parent shape's name or of the object's class name,
    ...), then reads the first key the object has, catching a ``KeyError`` for each one it
    lacks (a DynamoDB attribute value is a structure of ten members, one of them set). For a
    plain ``dict`` (every DynamoDB, and many other, results) the keys depend only on the
    picker's providers, the member and its shape (a ``dict`` has no ``Meta`` and its class
    is always ``dict``): they are kept, and each is read with ``dict.get``, which answers
    what ``obj[key]`` or its ``KeyError`` did, in the same order. A picker with response
    transformers, or any other object, is served by moto's own code."""
    serialize = _moto("core.serialize")

    picker_type = serialize.AttributePicker
    call = picker_type.__call__
    if getattr(call, "_cached", False):
        return
    serializer_type = serialize.ResponseSerializer
    pick = serializer_type.get_value
    get_value, missing = serialize.get_value, serialize.MISSING
    #: (picker class, its providers, member, id(shape), id(parent)) -> (keys, shape, parent):
    #: the shapes are kept alive with their keys, so their ids are not reused.
    found: dict[tuple[Any, ...], tuple[tuple[tuple[str, bool], ...], Any, Any]] = {}

    def keys_of(picker: Any, context: Any, key: str, shape: Any) -> Any:
        """The keys to try, or None (``context`` None) when they are not known yet."""
        parent = getattr(shape, "parent", None)
        cache_key = (type(picker), tuple(picker.alias_providers), key, id(shape), id(parent))
        kept = found.get(cache_key)
        if kept is None or kept[1] is not shape or kept[2] is not parent:
            if context is None:
                return None
            keys = tuple((name, "." in name) for name in picker.get_possible_keys(context))
            kept = (keys, shape, parent)
            if len(found) < MAX_CACHED:
                found[cache_key] = kept
        return kept[0]

    def read(obj: dict[str, Any], keys: tuple[tuple[str, bool], ...]) -> Any:
        for name, dotted in keys:
            value = get_value(obj, name, missing) if dotted else obj.get(name, missing)
            if value is not missing:
                return value
        return None

    def __call__(self: Any, context: Any) -> Any:
        obj = context.obj
        if type(obj) is not dict:
            return call(self, context)
        value = read(obj, keys_of(self, context, context.key, context.shape))
        key_path = f"{context.key_path}.{context.key}"
        for transform_path, transform in self.response_transformers.items():
            if key_path.endswith(transform_path):
                value = transform(value)
                break
        return value

    def get_value_of(self: Any, value: Any, key: str, shape: Any) -> Any:
        picker = self._value_picker
        if (
            type(value) is dict
            and type(picker).__call__ is __call__
            and not picker.response_transformers
        ):
            keys = keys_of(picker, None, key, shape)
            if keys is not None:
                return read(value, keys)
        return pick(self, value, key, shape)

    _mark_cached(__call__)
    picker_type.__call__ = __call__
    serializer_type.get_value = get_value_of


def _find_known_backends_by_identity() -> None:
    """Answer moto's "is this backend map known?" by identity first.

    Every lookup of a service's backends (``sqs_backends[account]``: each request moto
    serves, and each of the lab's own reads) asks whether the map is in
    ``BackendDict._instances``, a list of every service in use, with ``in``: a Python
    ``__eq__`` and ``__len__`` for each entry before its own. When the account's backends
    exist and the map is in the list as itself, that lookup would change nothing, and now
    returns at once; in every other case moto's own method runs."""
    base_backend = _moto("core.base_backend")

    backends = base_backend.BackendDict
    create = backends._create_account_specific_backend
    if getattr(create, "_cached", False):
        return

    def _create_account_specific_backend(self: Any, account_id: str) -> None:
        with base_backend.backend_lock:
            if dict.__contains__(self, account_id) and any(
                known is self for known in backends._instances
            ):
                return
        create(self, account_id)

    _mark_cached(_create_account_specific_backend)
    backends._create_account_specific_backend = _create_account_specific_backend
