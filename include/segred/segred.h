// segred/segred.h: umbrella header.
#pragma once
#include "segred/dtype.h"
#include "segred/error.h"
#include "segred/plan.h"
#include "segred/segment_reduce.h"
#include "segred/segment_softmax.h"
#include "segred/softmax.h"
#include "segred/tensor.h"
#include "segred/trace.h"
#include "segred/version.h"
