"""Task arguments, results and exceptions survive the trip between client and worker."""

import pytest

from dsched import serialize
from dsched.serialize import RemoteTraceback, TaskError, TaskRef


class Placeholder:
    def __init__(self, key):
        self.key = key


def to_ref(value):
    return TaskRef(value.key) if isinstance(value, Placeholder) else None


def test_futures_in_nested_containers_become_refs_and_are_substituted_back():
    args = ([Placeholder("a"), (1, Placeholder("b"))], {"x": Placeholder("a"), "y": 2})
    replaced, keys = serialize.replace_futures(args, to_ref)
    assert keys == {"a", "b"}
    assert replaced == ([TaskRef("a"), (1, TaskRef("b"))], {"x": TaskRef("a"), "y": 2})
    shipped = serialize.loads(serialize.dumps(replaced))
    assert serialize.substitute(shipped, {"a": 10, "b": 20}) == ([10, (1, 20)], {"x": 10, "y": 2})


def test_lambdas_and_closures_travel():
    offset = 5
    function = serialize.loads(serialize.dumps(lambda x: x + offset))
    assert function(1) == 6


def test_an_exception_comes_back_with_its_type_and_remote_traceback():
    def failing():
        raise KeyError("missing thing")

    try:
        failing()
    except KeyError as exc:
        payload, text = serialize.dumps_exception(exc)
    rebuilt = serialize.loads_exception(payload, text)
    assert type(rebuilt) is KeyError and rebuilt.args == ("missing thing",)
    assert isinstance(rebuilt.__cause__, RemoteTraceback)
    assert "in failing" in str(rebuilt.__cause__)


def test_an_unpicklable_exception_becomes_a_task_error_naming_its_type():
    class Local(Exception):
        def __reduce__(self):
            raise TypeError("no pickling")

    payload, text = serialize.dumps_exception(Local("boom"))
    rebuilt = serialize.loads_exception(payload, text)
    assert isinstance(rebuilt, TaskError) and "Local" in str(rebuilt) and "boom" in str(rebuilt)


@pytest.mark.parametrize("value, low", [(b"x" * 1000, 1000), ("y" * 50, 50), ([b"z" * 100] * 3, 300)])
def test_sizeof_counts_payload_bytes(value, low):
    assert serialize.sizeof(value) >= low


def test_an_exception_that_is_not_an_exception_arrives_as_an_ordinary_error_naming_it():
    from dsched.errors import TaskExit

    for original in (SystemExit(3), KeyboardInterrupt("stop"), GeneratorExit()):
        payload, text = serialize.dumps_exception(original)
        rebuilt = serialize.loads_exception(payload, text)
        assert isinstance(rebuilt, TaskExit) and isinstance(rebuilt, Exception)
        assert type(rebuilt.original) is type(original)
        assert type(original).__name__ in str(rebuilt)
        assert isinstance(rebuilt.__cause__, serialize.RemoteTraceback)
    assert str(serialize.loads_exception(*serialize.dumps_exception(SystemExit(3)))) == (
        "the task raised SystemExit(3)")



def test_a_function_sent_by_value_keeps_its_file_name_and_brings_its_lines():
    """A notebook cell's function: its lines live only in the client's linecache; the worker
    (here: the same process with that cache emptied) shows them in the traceback."""
    import linecache
    import traceback

    cell = "<notebook-cell-7>"
    source = ("def outer(x):\n"
              "    def inner(y):\n"
              "        return 1 / y\n"
              "    return inner(x - x)\n")
    linecache.cache[cell] = (len(source), None, source.splitlines(True), cell)
    namespace = {"__name__": "not_an_importable_module"}
    exec(compile(source, cell, "exec"), namespace)
    payload = serialize.dumps(namespace["outer"])
    del linecache.cache[cell]

    function = serialize.loads(payload)
    with pytest.raises(ZeroDivisionError) as raised:
        function(3)
    text = "".join(traceback.format_exception(raised.value))
    assert f'File "{cell}", line 4, in outer\n    return inner(x - x)\n' in text
    assert f'File "{cell}", line 3, in inner\n    return 1 / y\n' in text
    linecache.cache.pop(cell, None)
