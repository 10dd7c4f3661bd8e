# Renders docs/dlq-bridge.1.md into the roff manual page dlq-bridge.1 with
# go-md2man (cmake -P, from the man-page rule of CMakeLists.txt).
#   -DMD2MAN=... -DIN=docs/dlq-bridge.1.md -DOUT=dlq-bridge.1 -DVERSION=x.y.z
# The page's first line is a pandoc title block, which go-md2man versions
# render differently (2.0.2, bookworm: the raw line; later ones split it on
# the parentheses), so the .TH line is written here, the same everywhere.
execute_process(COMMAND ${MD2MAN} -in ${IN} -out ${OUT}.tmp RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "go-md2man failed on ${IN} (exit ${rc})")
endif()
file(READ ${OUT}.tmp page)
string(REGEX REPLACE "\n\\.TH [^\n]*\n"
       "\n.TH DLQ-BRIDGE 1 \"\" \"dlq-bridge ${VERSION}\" \"dlq-bridge manual\"\n" fixed "${page}")
if(fixed STREQUAL page)
  message(FATAL_ERROR "go-md2man gave no .TH line for ${IN}")
endif()
file(WRITE ${OUT} "${fixed}")
file(REMOVE ${OUT}.tmp)
