"""The one error type that means "your input is wrong", as opposed to a bug.

UserError   raised with a message that names the input and the fix; scripts show it as one line
"""


class UserError(Exception):
    """Bad input a user can fix: a missing shard, a store written for another model, a gate not reached."""
