"""The control loop: observe → decide → act, behind the ports in `ports.py`."""
