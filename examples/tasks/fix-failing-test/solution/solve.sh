#!/bin/bash
sed -i 's|sum(values) / (len(values) + 1)|sum(values) / len(values)|' calc/__init__.py
