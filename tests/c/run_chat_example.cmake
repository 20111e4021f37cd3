# Runs examples/c/chat on a model with two user lines; it must answer both and exit 0.
file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/chat_input.txt "Once upon a time\nThe cat sat\n")
string(REPLACE "|" ";" emulator "${EMULATOR}")   # empty unless cross-compiled
execute_process(COMMAND ${emulator} ${CHAT} ${MODEL} --format zephyr --max-tokens 24 --temperature 0
                INPUT_FILE ${CMAKE_CURRENT_BINARY_DIR}/chat_input.txt
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
message("${out}")
if(NOT rc EQUAL 0)
    message(FATAL_ERROR "chat exited with ${rc}: ${err}")
endif()
string(REGEX MATCHALL "\n" lines "${out}")
list(LENGTH lines n)
if(n LESS 2)
    message(FATAL_ERROR "chat printed ${n} replies, expected 2: ${out}")
endif()
