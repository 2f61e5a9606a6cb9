"""The one exception type of qcore."""


class QuantizationError(ValueError):
    """Invalid input for a quantization operator.

    The message names the operator version, the argument at fault and what would be valid.
    """
