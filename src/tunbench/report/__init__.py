"""Analysis and presentation of result folders."""
