"""Monitorability validation (issue 7, part 3): can a weak supervisor tell a teacher's wrong traces
from its right ones, and does FOTU predict how well?"""

from legival_core.monitor.sabotage import Sabotage, inject_error
from legival_core.monitor.stats import prf
from legival_core.monitor.supervisor import parse_verdict, supervise

__all__ = ["Sabotage", "inject_error", "parse_verdict", "prf", "supervise"]
