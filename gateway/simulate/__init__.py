"""``apf-gateway simulate``: what-if runs of the real flow controller in virtual time."""

from gateway.simulate.engine import Simulation, SimulationError, SimulationResult, simulate
from gateway.simulate.report import render_text, to_json
from gateway.simulate.traffic import Traffic, TrafficError, load_traffic, parse_traffic

__all__ = [
    "Simulation",
    "SimulationError",
    "SimulationResult",
    "Traffic",
    "TrafficError",
    "load_traffic",
    "parse_traffic",
    "render_text",
    "simulate",
    "to_json",
]
