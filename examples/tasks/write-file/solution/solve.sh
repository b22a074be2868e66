#!/bin/bash
printf 'Hello, agentbake!\n' > hello.txt
