"""Whether a user operator's output fits the job's ``output_type``, checked before it is emitted.

A plain ``map`` whose function returns a value its ``output_type`` cannot encode (a str where
``Types.LONG()`` is asked, a tuple of the wrong arity, a lone surrogate in a ``Types.STRING()``)
fails the whole job in PyFlink's output coder, and under a Kafka source the restarted job meets
the same record again: a restart loop that one record causes. The hook encodes each output with
the coder PyFlink's Python worker uses for that type (``pyflink.fn_execution.coders``) before it
emits it; an output that does not encode makes its record a dead letter with the reason, as a
record whose operator raised, and the job goes on. An output that fits is emitted unchanged
(the hook changes where work runs, never what it computes).

What is checked, and why not more:

- ``None``: only ``Types.STRING()`` carries it (:func:`pyflink_jobs.flink_ops.carries_none`);
  for every other type it is a misfit.
- In PyFlink's process mode (the default), every type but pickled objects, with the very
  coder the worker builds: from the type's proto as Flink's Java side writes it
  (:func:`worker_type_proto`, asked once when the job is built). Pickled outputs
  (``Types.PICKLED_BYTE_ARRAY()``, the default) are not checked: the worker pickles with
  cloudpickle, which takes almost anything, and a second pickling of a large output (an image,
  a tensor) would cost as much as the first.
- In thread mode, the None rule only: outputs cross into Java through other converters there
  (``pyflink.fn_execution.embedded``), and a check with the process-mode coder could refuse an
  output that mode accepts.

Cost: one encode per output (0.3-1 us for small records here; an ASCII str or a bytes output
for a text or bytes type is accepted without encoding).

Example::

    >>> from pyflink.common import Types                               # doctest: +SKIP
    >>> fit = OutputFit.for_output_type(Types.LONG(), "process")       # doctest: +SKIP
    >>> fit.check(3), fit.problem("three")                             # doctest: +SKIP
    (3, "the operator's output (str: 'three') does not fit the job's output_type Long: ...")
"""

from __future__ import annotations

__all__ = ["OutputFit", "OutputMisfit", "NoneOutput", "worker_type_proto"]


class OutputMisfit(ValueError):
    """A user operator's output that the job's ``output_type`` cannot carry."""


class NoneOutput(OutputMisfit):
    """The user's operator gave None where the job's ``output_type`` cannot carry it."""

    def __init__(self):
        super().__init__(
            "the operator returned None, which the job's output_type cannot carry between "
            "operators (Flink's STRING can; a plain map's None fails the job where it reaches "
            "a Java operator or sink): return a value, or return no output with flat=True")


#: at most this many characters of an output's text in a reason (outputs may be huge)
SHOWN_CHARS = 120


class OutputFit:
    """The check for one job's outputs: picklable (it travels to the Python workers with the
    executor's settings); the coder is built there, on first use, from the type's proto.

    ``proto``: the output type as PyFlink's Java side describes it to its Python workers (a
    serialized ``TypeInfo``; None: only the None rule); ``carries_none``: whether None fits;
    ``type_text``: the type as a reason names it."""

    def __init__(self, proto: bytes | None = None, carries_none: bool = True,
                 type_text: str = ""):
        self.proto, self.carries_none, self.type_text = proto, carries_none, type_text
        self._impl = None      # the coder's encoder; False: it could not be built (no check)
        self._plain = None     # outputs accepted without encoding (see _encoder)

    @classmethod
    def for_output_type(cls, output_type, python_mode: str = "process") -> "OutputFit":
        """The check for ``output_type`` (None: pickled) in ``python_mode``."""
        from pyflink_jobs.flink_ops import carries_none
        none, text = carries_none(output_type), str(output_type)
        if output_type is None or python_mode == "thread":
            return cls(None, none, text)
        from pyflink.common.typeinfo import PickledBytesTypeInfo
        if isinstance(output_type, PickledBytesTypeInfo):
            return cls(None, none, text)
        return cls(worker_type_proto(output_type), none, text)

    def __getstate__(self):
        return {"proto": self.proto, "carries_none": self.carries_none,
                "type_text": self.type_text}

    def __setstate__(self, state):
        self.__init__(state["proto"], state["carries_none"], state["type_text"])

    def _encoder(self):
        """The worker's coder for the type (built once), or False when it cannot be built."""
        if self._impl is None:
            try:
                from pyflink.fn_execution import flink_fn_execution_pb2
                from pyflink.fn_execution.coders import from_type_info_proto
                coder = from_type_info_proto(
                    flink_fn_execution_pb2.TypeInfo.FromString(self.proto))
                self._impl = coder.get_impl()
            except Exception:  # noqa: BLE001 - no coder here: only the None rule applies
                self._impl = False
                return False
            name = type(coder).__name__
            self._plain = str if name == "CharCoder" else bytes if name == "BinaryCoder" \
                else None
        return self._impl

    def problem(self, output) -> str | None:
        """Why ``output`` does not fit (None: it fits)."""
        if output is None:
            return None if self.carries_none else str(NoneOutput())
        if self.proto is None:
            return None
        encoder = self._impl if self._impl is not None else self._encoder()
        if encoder is False:
            return None
        if type(output) is self._plain and (self._plain is bytes or output.isascii()):
            return None
        try:
            encoder.encode(output)
        except Exception as exc:  # noqa: BLE001 - whatever the coder raises is the reason
            shown = repr(output)
            if len(shown) > SHOWN_CHARS:
                shown = shown[:SHOWN_CHARS] + "..."
            return (f"the operator's output ({type(output).__name__}: {shown}) does not fit "
                    f"the job's output_type {self.type_text}: {type(exc).__name__}: {exc}")
        return None

    def check(self, output):
        """``output`` when it fits; else :class:`OutputMisfit` (:class:`NoneOutput`)."""
        if output is None and not self.carries_none:
            raise NoneOutput()
        reason = self.problem(output)
        if reason is not None:
            raise OutputMisfit(reason)
        return output

    def checking(self, call, flat: bool):
        """``call(record)`` that raises :class:`OutputMisfit` where an output would not fit
        (``flat``: a list of outputs, each checked); ``call`` itself when nothing is checked
        (no type to check, and None fits)."""
        if self.proto is None and self.carries_none:
            return call
        check = self.check
        if not flat and self.proto is not None and self._encoder() and self._plain is str:
            def checked_text(record):   # the common case, text out, without a further call
                output = call(record)
                if type(output) is str and output.isascii():
                    return output
                return check(output)
            return checked_text
        if flat:
            def checked(record):
                outputs = call(record)
                for output in outputs:
                    check(output)
                return outputs
        else:
            def checked(record):
                return check(call(record))
        return checked


def worker_type_proto(output_type) -> bytes | None:
    """``output_type`` as Flink's Java side describes it to the Python workers (a serialized
    ``TypeInfo`` proto, from which the worker builds its output coder), or None when there is
    no JVM to ask (then only the None rule is checked).

    Why the proto and not ``coders.from_type_info`` on the Python side: the two differ for some
    types (``Types.LIST``: a primitive-array coder in the worker, a generic one from
    ``from_type_info``), and the check must refuse exactly what the worker would fail on."""
    try:
        from pyflink.java_gateway import get_gateway
        jvm = get_gateway().jvm
        converter = jvm.org.apache.flink.streaming.api.utils.PythonTypeUtils \
            .TypeInfoToProtoConverter
        proto = converter.toTypeInfoProto(output_type.get_java_type_info(),
                                          jvm.Thread.currentThread().getContextClassLoader())
        return bytes(proto.toByteArray())
    except Exception:  # noqa: BLE001 - no JVM or an unknown type: no coder check
        return None
