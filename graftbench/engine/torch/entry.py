"""The torch engine as the registry opens it (:class:`graftbench.engine.base.EngineFactory`): its capabilities, the
options it takes and how it loads a model; importing this module imports no torch (the instruction-set pin comes
first)."""

from __future__ import annotations

from . import CAPABILITIES, NAME
from ..base import EngineOptions, EngineSession


class TorchEngineFactory:
    """The torch engine: a ``transformers`` model on the CPU or CUDA
    (:func:`graftbench.engine.torch.session.open_session`)."""

    name = NAME
    capabilities = CAPABILITIES
    options = frozenset({"dtype", "threads", "device", "kernels", "isa"})
    pinned_dtype = None  # --dtype chooses it
    benchmark_module = "graftbench.engine.torch.bench_ops"  # its benchmark operations (base.BENCHMARK)
    loader_module = "graftbench.engine.torch.loading"  # its model loading code alone, for the load probe
    faults_module = "graftbench.engine.torch.faults"  # its fault scenarios (base.FAULT_SCENARIOS)
    isa_variable = "GRAFTBENCH_ISA"  # the environment variable that picks a process's instruction-set pin

    def open(self, options: EngineOptions) -> EngineSession:
        """Load ``options.model`` on ``options.device`` (resolved: :func:`graftbench.engine.device.resolve`) in
        ``options.dtype`` (``auto``: the device's default) and pin the config. Raises
        :class:`graftbench.engine.models.ModelError`, :class:`graftbench.engine.device.DeviceError` or ``ValueError``
        naming what is wrong."""
        from ..device import dtype_for, resolve
        from .session import open_session

        device = resolve(options.device)
        return open_session(options.model, dtype=dtype_for(options.dtype, device), chunk_size=options.chunk_size,
                            threads=options.threads, device=device, kernels=options.kernels)

    def loading_text(self, options: EngineOptions) -> str:
        """``loading MODEL (DTYPE) on DEVICE``."""
        from ..device import resolve

        return f"loading {options.model} ({options.dtype}) on {resolve(options.device)}"

    def fixed_pin(self) -> dict:
        """None: ``--dtype`` and ``--isa`` choose the pin's dtype and instruction set."""
        return {}

    def adopt_pin(self, pin: dict) -> None:
        """Nothing beyond the options: the instruction-set pin is the process's, applied by the command."""

    def why_not_runnable(self, pin: dict) -> str | None:
        """An instruction-set pin this CPU cannot run: one it does not offer, or the native kernels of another CPU."""
        from ...util import isa

        pin_isa, here = pin.get("isa", "native"), isa.native_capability()
        if not isa.supported(pin_isa):
            return f"pinned to --isa {pin_isa}; this CPU offers {here}"
        if pin_isa == "native" and pin.get("cpu_capability") != here:
            return f"pinned to the native kernels of {pin.get('cpu_capability')}; this CPU is {here}"
        return None

    def replay_options(self, pin: dict) -> dict:
        """The :class:`graftbench.engine.base.EngineOptions` fields that reopen the torch engine under ``pin``."""
        return {"model": pin["model"], "dtype": pin["dtype"], "chunk_size": pin["chunk_size"],
                "threads": pin["threads"]}


ENGINE = TorchEngineFactory()
