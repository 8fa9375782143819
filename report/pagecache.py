"""Report pages rendered from compiled templates kept as Python bytecode.

Jinja2 compiles a template into Python code that calls only its runtime (``jinja2.runtime``,
the filters and tests) and a few methods of the environment.  That code is kept here, in the
private template cache, as marshalled code objects; a later run executes them on
``pageruntime`` and ``pagefilters`` (the part of Jinja2's runtime, filters, tests and
MarkupSafe the page uses) with a small stand-in for the environment, without importing Jinja2
or MarkupSafe (they bring in most of Jinja2 and a fifth of the standard library: more than the
rendering costs).
The page is the one Jinja2 renders: the same compiled code runs on the same rules.  Importing
Jinja2 instead costs a report about 57 ms of CPU, a fifth of a large report's time
(``benchmarks/report.py``).  Whenever
an entry is missing, stale or fails, the caller renders with Jinja2 and stores the entries
again (``store``).

An entry is keyed by what the compiled code depends on: the template sources, wallflame's
version and the page code that defines the filters (``report/html.py``) and runs them
(``report/pageruntime.py``, ``report/pagefilters.py``), Jinja2's files and the interpreter's
bytecode version.
"""

from __future__ import annotations

import builtins
import importlib
import marshal
import os
import sys
from types import CodeType, ModuleType

import wallflame
from wallflame.cachedir import write_private
from wallflame.report import pagefilters, pageruntime

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from jinja2 import Environment


def _sha256() -> Callable[..., Any]:
    """CPython's own SHA-256, which starts without OpenSSL (``hashlib`` loads it: 2 ms);
    ``hashlib``'s where it is not built."""
    for name in ("_sha256", "_sha2"):
        try:
            return importlib.import_module(name).sha256  # type: ignore[no-any-return]
        except (ImportError, AttributeError):
            pass
    import hashlib

    return hashlib.sha256


sha256 = _sha256()

#: The page and the templates it extends or includes.
NAMES = ("report.html", "base.html")
SUFFIX = ".wallflame-code"
#: Jinja2's files whose change makes an entry stale.
_JINJA_FILES = ("__init__.py", "compiler.py", "runtime.py", "filters.py", "tests.py",
                "utils.py", "nodes.py", "defaults.py", "environment.py")


def _jinja2_dir() -> str | None:
    pkg = sys.modules.get("jinja2")
    if pkg is not None and getattr(pkg, "__path__", None):
        return str(next(iter(pkg.__path__)))
    from importlib.machinery import PathFinder

    spec = PathFinder.find_spec("jinja2")  # (without importing ``importlib.util``)
    if spec is None:
        import importlib.util

        spec = importlib.util.find_spec("jinja2")
    locations = spec.submodule_search_locations if spec is not None else None
    return str(next(iter(locations))) if locations else None


def cache_key(templates: str, filters: dict[str, Any]) -> str | None:
    """What the entries of this run must have been stored under (None: Jinja2 not found).
    ``filters``: the page's own filters, whose way of being called the code depends on."""
    jinja = _jinja2_dir()
    if jinja is None:
        return None
    h = sha256()
    calls = sorted((n, str(getattr(f, "jinja_pass_arg", ""))) for n, f in filters.items())
    h.update(repr((wallflame.__version__, sys.version, sys.implementation.cache_tag,
                   calls)).encode())
    files = [os.path.join(templates, n) for n in NAMES]
    files += [os.path.join(jinja, n) for n in _JINJA_FILES]
    here = os.path.dirname(os.path.abspath(__file__))
    files += [os.path.join(here, n) for n in ("html.py", "pageruntime.py", "pagefilters.py")]
    for path in files:
        try:
            st = os.stat(path)
        except OSError:
            return None
        h.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    for n in NAMES:
        with open(os.path.join(templates, n), "rb") as f:
            h.update(f.read())
    return str(h.hexdigest())


def store(env: Environment, folder: str, key: str) -> None:
    """Compile the templates with ``env`` as Jinja2 would and keep the code in ``folder``
    (a private directory).  A folder that cannot be written is no error.  Nothing is kept
    when Jinja2's filters or tests are not called as ``pageruntime``'s are (the code calls
    them so)."""
    assert env.loader is not None
    if not pagefilters.conventions(env.filters, env.tests):
        return
    for name in NAMES:
        source, filename, _ = env.loader.get_source(env, name)
        code = compile(env.compile(source, name, filename, raw=True), filename or name, "exec")
        data = key.encode() + b"\n" + marshal.dumps(code)
        if not write_private(_entry(folder, key, name), data):
            return


def _entry(folder: str, key: str, name: str) -> str:
    """One file per key and template, so that several installations (a virtual environment
    and a checkout, two versions) sharing the cache each keep their own."""
    return os.path.join(folder, f"{key[:16]}-{name}{SUFFIX}")


def _load(folder: str, key: str) -> dict[str, CodeType] | None:
    codes = {}
    for name in NAMES:
        try:
            with open(_entry(folder, key, name), "rb") as f:
                data = f.read()
        except OSError:
            return None
        head, _, body = data.partition(b"\n")
        if head != key.encode():
            return None
        try:
            code = marshal.loads(body)
        except (EOFError, ValueError, TypeError):
            return None
        if not isinstance(code, CodeType):
            return None
        codes[name] = code
    return codes


def _import(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (),
            level: int = 0) -> ModuleType:
    """The one import compiled template code makes (``from jinja2.runtime import ...``),
    answered with ``pageruntime``; any other fails (the page is then rendered by Jinja2)."""
    if name == "jinja2.runtime" and level == 0:
        return pageruntime
    raise ImportError(f"{name}: not available to kept template code")


#: The builtins kept template code runs with: Python's, its import answered by ``_import``.
_BUILTINS = {**vars(builtins), "__import__": _import}


class _Environment:
    """What compiled templates use of an ``Environment`` configured as
    ``report.html.environment`` configures it (autoescape, strict undefined), on
    ``pageruntime``."""

    def __init__(self, filters: dict[str, Any], globals_: dict[str, Any],
                 codes: dict[str, CodeType]) -> None:
        self.filters = dict(pagefilters.FILTERS)
        self.filters.update(filters)
        self.tests = dict(pagefilters.TESTS)
        self.globals = dict(globals_)
        self.undefined = pageruntime.StrictUndefined
        self.autoescape = True
        self.is_async = False
        self.sandboxed = False
        self.finalize = None
        self.newline_sequence = "\n"
        self.concat = "".join
        self._codes = codes
        self._templates: dict[str, _Template] = {}

    def getitem(self, obj: Any, argument: Any) -> Any:
        try:
            return obj[argument]
        except (AttributeError, TypeError, LookupError):
            if isinstance(argument, str):
                try:
                    return getattr(obj, argument)
                except AttributeError:
                    pass
            return self.undefined(obj=obj, name=argument)

    def getattr(self, obj: Any, attribute: str) -> Any:
        try:
            return getattr(obj, attribute)
        except AttributeError:
            pass
        try:
            return obj[attribute]
        except (TypeError, LookupError, AttributeError):
            return self.undefined(obj=obj, name=attribute)

    def _call(self, table: dict[str, Any], kind: str, name: Any, value: Any,
              args: Any, kwargs: Any, context: Any, eval_ctx: Any) -> Any:
        func = table.get(name)
        if func is None:
            raise pageruntime.TemplateRuntimeError(f"No {kind} named {name!r}.")
        call_args = [value, *(args if args is not None else ())]
        pass_arg = pageruntime.pass_name(func)
        if pass_arg == "context":
            if context is None:
                raise pageruntime.TemplateRuntimeError(
                    f"Attempted to invoke a context {kind} without context.")
            call_args.insert(0, context)
        elif pass_arg == "eval_context":
            if eval_ctx is None:
                eval_ctx = (context.eval_ctx if context is not None
                            else pageruntime.EvalContext(self))
            call_args.insert(0, eval_ctx)
        elif pass_arg == "environment":
            call_args.insert(0, self)
        return func(*call_args, **(kwargs if kwargs is not None else {}))

    def call_filter(self, name: str, value: Any, args: Any = None, kwargs: Any = None,
                    context: Any = None, eval_ctx: Any = None) -> Any:
        return self._call(self.filters, "filter", name, value, args, kwargs, context, eval_ctx)

    def call_test(self, name: str, value: Any, args: Any = None, kwargs: Any = None,
                  context: Any = None, eval_ctx: Any = None) -> Any:
        return self._call(self.tests, "test", name, value, args, kwargs, context, eval_ctx)

    def get_template(self, name: str, parent: str | None = None,
                     globals: Any = None) -> _Template:
        t = self._templates.get(name)
        if t is None:
            if name not in self._codes:
                raise pageruntime.TemplateNotFound(name)
            t = self._templates[name] = _Template(self, self._codes[name])
        return t


class _Template:
    """A compiled template's namespace, as ``jinja2.Template`` keeps it."""

    def __init__(self, env: _Environment, code: CodeType) -> None:
        namespace: dict[str, Any] = {"environment": env, "__file__": code.co_filename,
                                     "__builtins__": _BUILTINS}
        exec(code, namespace)  # code compiled from our own templates, from a private folder
        self.environment = env
        self.globals = env.globals
        self.name = namespace["name"]
        self.blocks = namespace["blocks"]
        self.root_render_func = namespace["root"]
        namespace["__jinja_template__"] = self

    def render(self, context: dict[str, Any]) -> str:
        ctx = pageruntime.new_context(self.environment, self.name, self.blocks, context,
                                      self.globals)
        return "".join(self.root_render_func(ctx))


def render(name: str, context: dict[str, Any], filters: dict[str, Any],
           globals_: dict[str, Any], folder: str, key: str) -> str | None:
    """The page ``name`` rendered from the kept code, or None (nothing kept for ``key``, or
    the kept code failed: the caller renders with Jinja2)."""
    codes = _load(folder, key)
    if codes is None:
        return None
    try:
        return _Environment(filters, globals_, codes).get_template(name).render(context)
    except Exception:  # Jinja2 renders it again, and reports any error
        return None
