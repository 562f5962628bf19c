# llm_target_warnings(target): -Wall -Wextra (and -Werror with LLM_WERROR) for our own code only;
# generated protobuf sources are built without them.
# NOTE: GCC 12 reports -Wrestrict inside libstdc++ for plain `"a" + std::string` at -O3 (GCC bug
# 105329, fixed in GCC 13); it is switched off for GCC 12 only.
function(llm_target_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-missing-field-initializers>
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>,$<VERSION_LESS:$<CXX_COMPILER_VERSION>,13>>:-Wno-restrict>
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${LLM_WERROR}>>:-Werror>)
endfunction()

# llm_library(name SOURCES ... [DEPS ...] [PUBLIC_DEPS ...]): a static library of one folder.
function(llm_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;PUBLIC_DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR})
  target_link_libraries(${name} PUBLIC ${ARG_PUBLIC_DEPS} PRIVATE ${ARG_DEPS})
  llm_target_warnings(${name})
endfunction()
