# Everything comes from Debian packages (scripts/setup.sh installs them).
find_package(Threads REQUIRED)
find_package(absl REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8>=10.40)  # \p{White_Space} (regex.cc)
pkg_check_modules(UTF8PROC REQUIRED IMPORTED_TARGET libutf8proc)
pkg_check_modules(NGHTTP2 REQUIRED IMPORTED_TARGET libnghttp2)
find_package(Protobuf REQUIRED)
find_package(gRPC CONFIG REQUIRED)
find_package(yaml-cpp REQUIRED)
find_package(OpenSSL REQUIRED)
find_package(prometheus-cpp CONFIG REQUIRED)
# The router's HTTP/1.1 front parses with Node's http-parser (Debian: libhttp-parser-dev, no .pc).
find_path(HTTP_PARSER_INCLUDE_DIR http_parser.h)
find_library(HTTP_PARSER_LIBRARY http_parser)
if(NOT HTTP_PARSER_INCLUDE_DIR OR NOT HTTP_PARSER_LIBRARY)
  message(FATAL_ERROR "http_parser.h / libhttp_parser not found: run scripts/setup.sh --build "
                      "(it installs libhttp-parser-dev)")
endif()
add_library(http_parser::http_parser UNKNOWN IMPORTED)
set_target_properties(http_parser::http_parser PROPERTIES
  IMPORTED_LOCATION "${HTTP_PARSER_LIBRARY}" INTERFACE_INCLUDE_DIRECTORIES "${HTTP_PARSER_INCLUDE_DIR}")
if(LLM_BUILD_TESTS)
  find_package(GTest)
  if(NOT GTest_FOUND)
    message(FATAL_ERROR "LLM_BUILD_TESTS is ON but GoogleTest was not found: run scripts/setup.sh "
                        "(it installs libgtest-dev and libgmock-dev), or build the programs alone "
                        "with scripts/build.sh --no-tests (-DLLM_BUILD_TESTS=OFF)")
  endif()
endif()
