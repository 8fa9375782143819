"""What the report page's compiled template code runs on, without Jinja2 or MarkupSafe.

Jinja2 compiles ``report.html`` into Python code that imports a dozen names from
``jinja2.runtime`` and calls a few filters and tests (``report/pagecache.py`` keeps that
code).  Importing Jinja2's runtime and its filters brings in most of Jinja2, MarkupSafe and a
fifth of the standard library (``inspect``, ``urllib.parse``, ``ipaddress``, ``random``,
``threading``, ``typing``): more than the whole rendering costs.  This module is the part of
them the page uses (its filters and tests: ``pagefilters``), written as Jinja2 3.1 and
MarkupSafe write it, so that the same code gives the same page: ``escape`` replaces the same
five characters, a macro's output is ``Markup``, the same ``Undefined`` rules hold
(``StrictUndefined``: any use of a missing value fails).  Anything it does not have (a filter,
a test, ``namespace()``, ``self``, a recursive loop) fails, and the caller renders with Jinja2
instead.
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

from collections.abc import Callable, Iterable, Iterator, Mapping
from itertools import chain

TYPE_CHECKING = False

if TYPE_CHECKING:
    from typing import Any, SupportsIndex


class _Missing:
    """The ``missing`` sentinel: a variable or argument not given."""

    def __repr__(self) -> str:
        return "missing"

    def __reduce__(self) -> str:
        return "missing"


missing: Any = _Missing()


class TemplateRuntimeError(Exception):
    """Rendering failed (``jinja2.exceptions.TemplateRuntimeError``)."""


class UndefinedError(TemplateRuntimeError):
    """An undefined value was used."""


class TemplateNotFound(LookupError):
    """A template this runtime does not have."""


def internalcode(f: Any) -> Any:
    return f


def identity(x: Any) -> Any:
    return x


class _Pass:
    """What a filter, test or callable takes before its value (``jinja2.utils._PassArg``:
    ``context``, ``eval_context`` or ``environment``)."""

    def __init__(self, name: str) -> None:
        self.name = name


def pass_name(obj: Any) -> str | None:
    """The name of what ``obj`` is passed first (Jinja2's marks and ours alike)."""
    mark = getattr(obj, "jinja_pass_arg", None)
    return None if mark is None else str(getattr(mark, "name", mark))


def passes(name: str) -> Callable[[Any], Any]:
    def mark(f: Any) -> Any:
        f.jinja_pass_arg = _Pass(name)
        return f
    return mark


# -- MarkupSafe's ``Markup`` and ``escape``, as far as a page uses them ---------------------

def _escape_inner(s: str) -> str:
    return (s.replace("&", "&amp;").replace(">", "&gt;").replace("<", "&lt;")
            .replace("'", "&#39;").replace('"', "&#34;"))


class Markup(str):
    """Text that is HTML already: ``escape`` leaves it as it is, and text joined to it or
    formatted into it is escaped (``markupsafe.Markup``)."""

    __slots__ = ()

    def __new__(cls, base: Any = "", encoding: str | None = None,
                errors: str = "strict") -> Markup:
        if hasattr(base, "__html__"):
            base = base.__html__()
        if encoding is None:
            return super().__new__(cls, base)
        return super().__new__(cls, base, encoding, errors)

    def __html__(self) -> Markup:
        return self

    def __add__(self, value: str) -> Markup:
        if isinstance(value, str) or hasattr(value, "__html__"):
            return self.__class__(super().__add__(self.escape(value)))
        return NotImplemented

    def __radd__(self, value: str) -> Markup:
        if isinstance(value, str) or hasattr(value, "__html__"):
            return self.escape(value).__add__(self)
        return NotImplemented

    def __mul__(self, value: SupportsIndex) -> Markup:
        return self.__class__(super().__mul__(value))

    def __rmul__(self, value: SupportsIndex) -> Markup:
        return self.__class__(super().__mul__(value))

    def __mod__(self, value: Any) -> Markup:
        if isinstance(value, tuple):
            value = tuple(_MarkupEscapeHelper(x, self.escape) for x in value)
        elif hasattr(type(value), "__getitem__") and not isinstance(value, str):
            value = _MarkupEscapeHelper(value, self.escape)
        else:
            value = (_MarkupEscapeHelper(value, self.escape),)
        return self.__class__(super().__mod__(value))

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({super().__repr__()})"

    def join(self, iterable: Iterable[Any]) -> Markup:
        return self.__class__(super().join(map(self.escape, iterable)))

    @classmethod
    def escape(cls, s: Any) -> Markup:
        rv = escape(s)
        if rv.__class__ is not cls:
            return cls(rv)
        return rv


class _MarkupEscapeHelper:
    """A value formatted into ``Markup`` with ``%``: escaped as it is converted."""

    def __init__(self, obj: Any, escape: Callable[[Any], Markup]) -> None:
        self.obj = obj
        self.escape = escape

    def __getitem__(self, item: Any) -> _MarkupEscapeHelper:
        return self.__class__(self.obj[item], self.escape)

    def __str__(self) -> str:
        return str(self.escape(self.obj))

    def __repr__(self) -> str:
        return str(self.escape(repr(self.obj)))

    def __int__(self) -> int:
        return int(self.obj)

    def __float__(self) -> float:
        return float(self.obj)


def escape(s: Any) -> Markup:
    """``s`` as HTML text: ``&``, ``<``, ``>``, ``'`` and ``"`` replaced, unless it is HTML
    already (it has ``__html__``); anything else converted with ``str`` first."""
    if s.__class__ is str:
        return Markup(_escape_inner(s))
    if hasattr(s, "__html__"):
        return Markup(s.__html__())
    return Markup(_escape_inner(str(s)))


def soft_str(s: Any) -> str:
    return s if isinstance(s, str) else str(s)


def markup_join(seq: Iterable[Any]) -> str:
    """Concatenation that escapes if necessary and converts to string."""
    buf = []
    iterator = map(soft_str, seq)
    for arg in iterator:
        buf.append(arg)
        if hasattr(arg, "__html__"):
            return Markup("").join(chain(buf, iterator))
    return "".join(buf)


def str_join(seq: Iterable[Any]) -> str:
    return "".join(map(str, seq))


# -- Undefined values -------------------------------------------------------------------

class Undefined:
    """A missing value: prints as nothing, is false and empty; anything else fails."""

    __slots__ = (
        "_undefined_exception",
        "_undefined_hint",
        "_undefined_name",
        "_undefined_obj",
    )

    def __init__(self, hint: str | None = None, obj: Any = missing, name: str | None = None,
                 exc: type[TemplateRuntimeError] = UndefinedError) -> None:
        self._undefined_hint = hint
        self._undefined_obj = obj
        self._undefined_name = name
        self._undefined_exception = exc

    @property
    def _undefined_message(self) -> str:
        if self._undefined_hint:
            return self._undefined_hint
        if self._undefined_obj is missing:
            return f"{self._undefined_name!r} is undefined"
        return f"{type(self._undefined_obj).__name__!r} has no {self._undefined_name!r}"

    def _fail_with_undefined_error(self, *args: Any, **kwargs: Any) -> Any:
        raise self._undefined_exception(self._undefined_message)

    def __getattr__(self, name: str) -> Any:
        if name[:2] == "__" and name[-2:] == "__":
            raise AttributeError(name)
        return self._fail_with_undefined_error()

    __add__ = __radd__ = __sub__ = __rsub__ = _fail_with_undefined_error
    __mul__ = __rmul__ = __div__ = __rdiv__ = _fail_with_undefined_error
    __truediv__ = __rtruediv__ = _fail_with_undefined_error
    __floordiv__ = __rfloordiv__ = _fail_with_undefined_error
    __mod__ = __rmod__ = _fail_with_undefined_error
    __pos__ = __neg__ = _fail_with_undefined_error
    __call__ = __getitem__ = _fail_with_undefined_error
    __lt__ = __le__ = __gt__ = __ge__ = _fail_with_undefined_error
    __int__ = __float__ = __complex__ = _fail_with_undefined_error
    __pow__ = __rpow__ = _fail_with_undefined_error

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return id(type(self))

    def __str__(self) -> str:
        return ""

    def __len__(self) -> int:
        return 0

    def __iter__(self) -> Iterator[Any]:
        yield from ()

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "Undefined"


class StrictUndefined(Undefined):
    """An undefined value that fails when printed, iterated, tested or compared too."""

    __slots__ = ()
    __iter__ = __str__ = __len__ = Undefined._fail_with_undefined_error
    __eq__ = __ne__ = __bool__ = __hash__ = Undefined._fail_with_undefined_error
    __contains__ = Undefined._fail_with_undefined_error


# -- Context, loops, macros ---------------------------------------------------------------

class EvalContext:
    """The evaluation context: whether output is escaped."""

    def __init__(self, environment: Any, template_name: str | None = None) -> None:
        self.environment = environment
        self.autoescape = environment.autoescape
        self.volatile = False


class Namespace:
    """``namespace()`` is not part of this runtime."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TemplateRuntimeError("namespace() is rendered by Jinja2")


class TemplateReference:
    """``self`` is not part of this runtime."""

    def __init__(self, context: Any) -> None:
        raise TemplateRuntimeError("self is rendered by Jinja2")


class Context:
    """A template's variables (``jinja2.runtime.Context``, without derived contexts)."""

    def __init__(self, environment: Any, parent: dict[str, Any], name: str | None,
                 blocks: dict[str, Callable[[Context], Iterator[str]]]) -> None:
        self.parent = parent
        self.vars: dict[str, Any] = {}
        self.environment = environment
        self.eval_ctx = EvalContext(environment, name)
        self.exported_vars: set[str] = set()
        self.name = name
        self.blocks = {k: [v] for k, v in blocks.items()}

    def resolve_or_missing(self, key: str) -> Any:
        if key in self.vars:
            return self.vars[key]
        if key in self.parent:
            return self.parent[key]
        return missing

    def resolve(self, key: str) -> Any:
        rv = self.resolve_or_missing(key)
        if rv is missing:
            return self.environment.undefined(name=key)
        return rv

    def __contains__(self, name: str) -> bool:
        return name in self.vars or name in self.parent

    def __getitem__(self, key: str) -> Any:
        item = self.resolve_or_missing(key)
        if item is missing:
            raise KeyError(key)
        return item

    def call(__self, __obj: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if hasattr(__obj, "__call__") and pass_name(__obj.__call__) is not None:  # noqa: B004
            __obj = __obj.__call__
        pass_arg = pass_name(__obj)
        if pass_arg == "context":
            raise TemplateRuntimeError("a context callable is rendered by Jinja2")
        if pass_arg == "eval_context":
            args = (__self.eval_ctx, *args)
        elif pass_arg == "environment":
            args = (__self.environment, *args)
        kwargs.pop("_block_vars", None)
        kwargs.pop("_loop_vars", None)
        try:
            return __obj(*args, **kwargs)
        except StopIteration:
            return __self.environment.undefined(
                "value was undefined because a callable raised a StopIteration exception")


def new_context(environment: Any, template_name: str | None,
                blocks: dict[str, Callable[[Context], Iterator[str]]],
                vars: dict[str, Any], globals: Mapping[str, Any]) -> Context:
    return Context(environment, dict(globals, **vars), template_name, blocks)


class LoopContext:
    """A ``for`` loop's ``loop`` variable (``jinja2.runtime.LoopContext``)."""

    index0 = -1
    _length: int | None = None
    _after: Any = missing
    _current: Any = missing
    _before: Any = missing
    _last_changed_value: Any = missing

    def __init__(self, iterable: Iterable[Any], undefined: type[Undefined],
                 recurse: Any = None, depth0: int = 0) -> None:
        self._iterable = iterable
        self._iterator = iter(iterable)
        self._undefined = undefined
        self._recurse = recurse
        self.depth0 = depth0

    @property
    def length(self) -> int:
        if self._length is not None:
            return self._length
        try:
            self._length = len(self._iterable)  # type: ignore[arg-type]
        except TypeError:
            iterable = list(self._iterator)
            self._iterator = iter(iterable)
            self._length = len(iterable) + self.index + (self._after is not missing)
        return self._length

    def __len__(self) -> int:
        return self.length

    @property
    def depth(self) -> int:
        return self.depth0 + 1

    @property
    def index(self) -> int:
        return self.index0 + 1

    @property
    def revindex0(self) -> int:
        return self.length - self.index

    @property
    def revindex(self) -> int:
        return self.length - self.index0

    @property
    def first(self) -> bool:
        return self.index0 == 0

    def _peek_next(self) -> Any:
        if self._after is not missing:
            return self._after
        self._after = next(self._iterator, missing)
        return self._after

    @property
    def last(self) -> bool:
        return self._peek_next() is missing

    @property
    def previtem(self) -> Any:
        if self.first:
            return self._undefined("there is no previous item")
        return self._before

    @property
    def nextitem(self) -> Any:
        rv = self._peek_next()
        if rv is missing:
            return self._undefined("there is no next item")
        return rv

    def cycle(self, *args: Any) -> Any:
        if not args:
            raise TypeError("no items for cycling given")
        return args[self.index0 % len(args)]

    def changed(self, *value: Any) -> bool:
        if self._last_changed_value != value:
            self._last_changed_value = value
            return True
        return False

    def __iter__(self) -> LoopContext:
        return self

    def __next__(self) -> tuple[Any, LoopContext]:
        if self._after is not missing:
            rv = self._after
            self._after = missing
        else:
            rv = next(self._iterator)
        self.index0 += 1
        self._before = self._current
        self._current = rv
        return rv, self

    def __call__(self, iterable: Iterable[Any]) -> str:
        raise TemplateRuntimeError("a recursive loop is rendered by Jinja2")


class Macro:
    """A macro of the template (``jinja2.runtime.Macro``): its output is ``Markup`` when the
    evaluation context escapes."""

    def __init__(self, environment: Any, func: Callable[..., str], name: str,
                 arguments: list[str], catch_kwargs: bool, catch_varargs: bool, caller: bool,
                 default_autoescape: bool | None = None) -> None:
        self._environment = environment
        self._func = func
        self._argument_count = len(arguments)
        self.name = name
        self.arguments = arguments
        self.catch_kwargs = catch_kwargs
        self.catch_varargs = catch_varargs
        self.caller = caller
        self.explicit_caller = "caller" in arguments
        if default_autoescape is None:
            default_autoescape = environment.autoescape
        self._default_autoescape = default_autoescape

    @passes("eval_context")
    def __call__(self, *args: Any, **kwargs: Any) -> str:
        if args and isinstance(args[0], EvalContext):
            autoescape = args[0].autoescape
            args = args[1:]
        else:
            autoescape = self._default_autoescape
        arguments = list(args[: self._argument_count])
        off = len(arguments)
        found_caller = False
        if off != self._argument_count:
            for name in self.arguments[len(arguments):]:
                try:
                    value = kwargs.pop(name)
                except KeyError:
                    value = missing
                if name == "caller":
                    found_caller = True
                arguments.append(value)
        else:
            found_caller = self.explicit_caller
        if self.caller and not found_caller:
            caller = kwargs.pop("caller", None)
            if caller is None:
                caller = self._environment.undefined("No caller defined", name="caller")
            arguments.append(caller)
        if self.catch_kwargs:
            arguments.append(kwargs)
        elif kwargs:
            if "caller" in kwargs:
                raise TypeError(f"macro {self.name!r} was invoked with two values for the "
                                "special caller argument. This is most likely a bug.")
            raise TypeError(
                f"macro {self.name!r} takes no keyword argument {next(iter(kwargs))!r}")
        if self.catch_varargs:
            arguments.append(args[self._argument_count:])
        elif len(args) > self._argument_count:
            raise TypeError(f"macro {self.name!r} takes not more than"
                            f" {len(self.arguments)} argument(s)")
        rv = self._func(*arguments)
        if autoescape:
            rv = Markup(rv)
        return rv

    def __repr__(self) -> str:
        name = "anonymous" if self.name is None else repr(self.name)
        return f"<{type(self).__name__} {name}>"
