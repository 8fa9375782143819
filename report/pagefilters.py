"""The filters and tests the report page's compiled template code calls (Jinja2 3.1's, for a
synchronous environment), written as Jinja2 writes them, on ``pageruntime``.

``conventions`` (checked when the code is kept) says how each filter and test here is
called, which must be how Jinja2's own were when it compiled the code.
"""

# The parts written after Jinja2 and MarkupSafe follow their code, which is under this licence:
#
# Copyright 2007 Pallets (Jinja2); Copyright 2010 Pallets (MarkupSafe)
#
# Redistribution and use in source and binary forms, with or without modification, are
# permitted provided that the following conditions are met:
#
# 1.  Redistributions of source code must retain the above copyright notice, this list of
#     conditions and the following disclaimer.
# 2.  Redistributions in binary form must reproduce the above copyright notice, this list of
#     conditions and the following disclaimer in the documentation and/or other materials
#     provided with the distribution.
# 3.  Neither the name of the copyright holder nor the names of its contributors may be used
#     to endorse or promote products derived from this software without specific prior
#     written permission.
#
# THIS SOFTWARE IS PROVIDED BY THE COPYRIGHT HOLDERS AND CONTRIBUTORS "AS IS" AND ANY EXPRESS
# OR IMPLIED WARRANTIES, INCLUDING, BUT NOT LIMITED TO, THE IMPLIED WARRANTIES OF
# MERCHANTABILITY AND FITNESS FOR A PARTICULAR PURPOSE ARE DISCLAIMED. IN NO EVENT SHALL THE
# COPYRIGHT HOLDER OR CONTRIBUTORS BE LIABLE FOR ANY DIRECT, INDIRECT, INCIDENTAL, SPECIAL,
# EXEMPLARY, OR CONSEQUENTIAL DAMAGES (INCLUDING, BUT NOT LIMITED TO, PROCUREMENT OF
# SUBSTITUTE GOODS OR SERVICES; LOSS OF USE, DATA, OR PROFITS; OR BUSINESS INTERRUPTION)
# HOWEVER CAUSED AND ON ANY THEORY OF LIABILITY, WHETHER IN CONTRACT, STRICT LIABILITY, OR
# TORT (INCLUDING NEGLIGENCE OR OTHERWISE) ARISING IN ANY WAY OUT OF THE USE OF THIS
# SOFTWARE, EVEN IF ADVISED OF THE POSSIBILITY OF SUCH DAMAGE.

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Iterator, Mapping

from wallflame.report.pageruntime import (
    Context,
    EvalContext,
    TemplateRuntimeError,
    Undefined,
    escape,
    pass_name,
    passes,
    soft_str,
)

TYPE_CHECKING = False

if TYPE_CHECKING:
    from typing import Any


def do_format(value: str, *args: Any, **kwargs: Any) -> str:
    if args and kwargs:
        raise TemplateRuntimeError("can't handle positional and keyword arguments at the same "
                                   "time")
    return soft_str(value) % (kwargs or args)


def _attribute_parts(attr: str | int | None) -> list[str | int]:
    if attr is None:
        return []
    if isinstance(attr, str):
        return [int(x) if x.isdigit() else x for x in attr.split(".")]
    return [attr]


def _attrgetter(environment: Any, attribute: str | int | None) -> Callable[[Any], Any]:
    parts = _attribute_parts(attribute)

    def attrgetter(item: Any) -> Any:
        for part in parts:
            item = environment.getitem(item, part)
        return item

    return attrgetter


@passes("eval_context")
def do_join(eval_ctx: EvalContext, value: Iterable[Any], d: str = "",
            attribute: str | int | None = None) -> str:
    if attribute is not None:
        value = map(_attrgetter(eval_ctx.environment, attribute), value)
    if not eval_ctx.autoescape:
        return str(d).join(map(str, value))
    if not hasattr(d, "__html__"):
        items = list(value)
        do_escape = False
        for idx, item in enumerate(items):
            if hasattr(item, "__html__"):
                do_escape = True
            else:
                items[idx] = str(item)
        sep: str = escape(d) if do_escape else str(d)
        return sep.join(items)
    return soft_str(d).join(map(soft_str, value))


@passes("eval_context")
def do_list(eval_ctx: EvalContext, value: Iterable[Any]) -> list[Any]:
    return list(value)


@passes("context")
def do_selectattr(context: Context, value: Iterable[Any], *args: Any,
                  **kwargs: Any) -> Iterator[Any]:
    if value:
        try:
            attr = args[0]
        except LookupError:
            raise TemplateRuntimeError("Missing parameter for attribute name") from None
        transfunc = _attrgetter(context.environment, attr)
        func: Callable[[Any], Any] = bool
        if len(args) > 1:
            name, rest = args[1], args[2:]

            def func(item: Any) -> Any:
                return context.environment.call_test(name, item, rest, kwargs, context)
        for item in value:
            if func(transfunc(item)):
                yield item


def do_dictsort(value: Mapping[Any, Any], case_sensitive: bool = False, by: str = "key",
                reverse: bool = False) -> list[tuple[Any, Any]]:
    if by == "key":
        pos = 0
    elif by == "value":
        pos = 1
    else:
        raise TemplateRuntimeError('You can only sort by either "key" or "value"')

    def sort_func(item: tuple[Any, Any]) -> Any:
        value = item[pos]
        if not case_sensitive and isinstance(value, str):
            value = value.lower()
        return value

    return sorted(value.items(), key=sort_func, reverse=reverse)


def test_defined(value: Any) -> bool:
    return not isinstance(value, Undefined)


def test_undefined(value: Any) -> bool:
    return isinstance(value, Undefined)


def test_none(value: Any) -> bool:
    return value is None


def test_mapping(value: Any) -> bool:
    return isinstance(value, Mapping)


FILTERS: dict[str, Callable[..., Any]] = {
    "format": do_format, "join": do_join, "length": len, "count": len, "list": do_list,
    "selectattr": do_selectattr, "dictsort": do_dictsort, "e": escape, "escape": escape,
}
TESTS: dict[str, Callable[..., Any]] = {
    "defined": test_defined, "undefined": test_undefined, "none": test_none,
    "mapping": test_mapping,
    "eq": operator.eq, "equalto": operator.eq, "==": operator.eq,
    "ne": operator.ne, "!=": operator.ne,
    "lt": operator.lt, "lessthan": operator.lt, "<": operator.lt,
    "le": operator.le, "<=": operator.le,
    "gt": operator.gt, "greaterthan": operator.gt, ">": operator.gt,
    "ge": operator.ge, ">=": operator.ge,
}


def conventions(filters: Mapping[str, Any], tests: Mapping[str, Any]) -> bool:
    """Whether Jinja2's ``filters`` and ``tests`` (an environment's) are called as this
    runtime's are: the compiled code calls a filter with what it takes first."""
    for mine, theirs in ((FILTERS, filters), (TESTS, tests)):
        for name, f in mine.items():
            if name not in theirs or pass_name(theirs[name]) != pass_name(f):
                return False
    return True
