// Minimal structured logging to stderr: one line per call, with time and component.
// Daemons redirect stderr to their log file.
#ifndef NIGHTSHIFT_COMMON_LOG_H_
#define NIGHTSHIFT_COMMON_LOG_H_

#include <sstream>
#include <string>

namespace nightshift {

void LogLine(const char* level, const std::string& message);

#define NS_LOG(level, expr)                             \
  do {                                                  \
    std::ostringstream _os;                             \
    _os << expr;                                        \
    ::nightshift::LogLine(level, _os.str());            \
  } while (0)
#define NS_INFO(expr) NS_LOG("I", expr)
#define NS_WARN(expr) NS_LOG("W", expr)
#define NS_ERROR(expr) NS_LOG("E", expr)

}  // namespace nightshift

#endif  // NIGHTSHIFT_COMMON_LOG_H_
