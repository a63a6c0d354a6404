# docs/coroutines.md shows each tutorial program whole: fails naming the program whose text
# in the page differs from its file here (edit both together).
file(READ ${DOC} doc)
foreach(prog pingpong ring halo reduction farm)
    file(READ ${DIR}/${prog}.cpp code)
    string(FIND "${doc}" "${code}" at)
    if(at EQUAL -1)
        message(FATAL_ERROR "${DOC} does not show tests/api/tutorial/${prog}.cpp as it is; "
                            "copy the file into the page's ${prog} code block")
    endif()
endforeach()
